package schema

// Laughs is laughs, for the fuzz targets of package schema_test.
var Laughs = laughs
