package tool

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/internal/jsontree"
	"github.com/toolmesh/toolmesh/pkg/schema"
)

// DomainType is a type of object that tools return and that methods (MethodOf) run on:
// its type name, what it is, and the JSON Schema its objects satisfy (empty: any
// object). A worker declares the domain types of a group with the group; the
// orchestrator binds a returned object for tool chaining only when it satisfies its
// type's schema.
type DomainType struct {
	TypeName    string
	Description string
	Schema      schema.Schema
}

// DomainTypeFor returns the domain type typeName of the Go struct T: its schema is
// inferred from T as Func infers an input schema.
func DomainTypeFor[T any](typeName, description string) (DomainType, error) {
	if strings.TrimSpace(typeName) == "" {
		return DomainType{}, errors.New("domain type: empty type name")
	}
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return DomainType{}, fmt.Errorf("%w: domain type %q: %s is not a struct", schema.ErrInvalid, typeName, t)
	}
	js, err := jsonschema.ForType(t, nil)
	if err != nil {
		return DomainType{}, fmt.Errorf("%w: domain type %q: %v", schema.ErrInvalid, typeName, err)
	}
	b, err := jsontree.Marshal(js)
	if err != nil {
		return DomainType{}, fmt.Errorf("%w: domain type %q: %v", schema.ErrInvalid, typeName, err)
	}
	s, err := schema.FromJSON(b)
	if err != nil {
		return DomainType{}, fmt.Errorf("domain type %q: %w", typeName, err)
	}
	return DomainType{TypeName: typeName, Description: description, Schema: s}, nil
}

// MustDomainTypeFor is DomainTypeFor that panics on an error.
func MustDomainTypeFor[T any](typeName, description string) DomainType {
	d, err := DomainTypeFor[T](typeName, description)
	if err != nil {
		panic(err)
	}
	return d
}
