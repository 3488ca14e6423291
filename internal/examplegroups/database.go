package examplegroups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The database group shows a selectable facade that creates tools: calling database with
// a connection's name creates a query tool for that connection, with its own name and
// description ("Query database at orders-replica") and the connection captured in the
// state it is bound to. Any replica rebuilds the tool from that state through the
// template database_query. No database is contacted: every query answers the same fixed
// rows.

// Database group texts.
const (
	DatabaseRole        = "database"
	DatabaseDescription = "Database tools: connect to a database and query it"
	DatabaseUsageNotes  = "Call database with a connection's name to get a tool that queries that database."

	DatabaseFacade                = "database"
	DatabaseFacadeDescription     = "Connect to a database. Call it with a connection's name, such as orders-replica, to get the tool that queries that database."
	DatabaseConnectionDescription = "name of the database connection, such as orders-replica"
	DatabaseUsageNotesAfter       = "Query with SELECT statements only: the databases are read-only."
	DatabaseTemplate              = "database_query"
	DatabaseTemplateDescription   = "Query a database; the database facade creates one such tool per connection"
	DatabaseQueryPrefix           = "query_"
	DatabaseQueryDescription      = "Query database at " // + the connection
	DatabaseSQLDescription        = "SQL-like query text, such as SELECT id, status, total FROM orders"
)

// connectionRE is what a connection's name may be: a query tool's name is made of it.
var connectionRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,47}$`)

// Connection is the input of database and the state of a query tool:
// {"connection":"orders-replica"}.
type Connection struct {
	Connection string `json:"connection"`
}

// Query is the input of a query tool.
type Query struct {
	SQL string `json:"sql" jsonschema:"SQL-like query text, such as SELECT id, status, total FROM orders"`
}

// DatabaseRows is what every query answers, after the line that names the connection.
const DatabaseRows = "id=1 status=shipped total=12.50\nid=2 status=pending total=7.25\nid=3 status=delivered total=30.00"

// Database returns the database group: the selectable facade database over the
// template database_query.
func Database() worker.Group { return databaseGroup(nil) }

func databaseGroup(wrap Wrap) worker.Group {
	tmpl := tool.NewTemplate(DatabaseTemplate, DatabaseTemplateDescription, func(_ context.Context, state []byte) ([]tool.Tool, error) {
		conn, err := readConnection(state)
		if err != nil {
			return nil, err
		}
		return wrap.all([]tool.Tool{QueryTool(conn)}), nil
	})
	facade := tool.Selectable(DatabaseFacade, DatabaseFacadeDescription,
		schema.Params(schema.String("connection", DatabaseConnectionDescription)), []tool.Tool{tmpl},
		tool.SelectorFunc(func(ctx context.Context, input string) ([]tool.Tool, error) {
			var in Connection
			if err := json.Unmarshal([]byte(input), &in); err != nil {
				return nil, fmt.Errorf("the arguments are not a JSON object with a connection: %v", err)
			}
			if err := checkConnection(in.Connection); err != nil {
				return nil, err
			}
			st := tool.StateFrom(ctx)
			if st == nil {
				return nil, errors.New("database has no state to keep the connection in: it must be called through the orchestrator")
			}
			state, err := json.Marshal(in)
			if err != nil {
				return nil, err
			}
			st.Set(state)
			return tmpl.Create(ctx, state)
		}),
		tool.UsageNotes(DatabaseUsageNotesAfter))
	return worker.Group{
		Role:        DatabaseRole,
		Description: DatabaseDescription,
		UsageNotes:  DatabaseUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Facades:     []tool.Facade{facade},
	}
}

// QueryToolName is the name of the query tool of a connection: "query_orders_replica".
func QueryToolName(connection string) string {
	return DatabaseQueryPrefix + strings.ReplaceAll(connection, "-", "_")
}

// QueryTool is the tool that queries connection; it answers fixed rows for a SELECT:
// "3 rows from orders-replica:\nid=1 ...".
func QueryTool(connection string) tool.Tool {
	return tool.MustFunc(QueryToolName(connection), DatabaseQueryDescription+connection,
		func(_ context.Context, in Query) (string, error) {
			q := strings.TrimSpace(in.SQL)
			if !strings.HasPrefix(strings.ToUpper(q), "SELECT ") {
				return "", fmt.Errorf("only SELECT queries can run: %s is read-only", connection)
			}
			return "3 rows from " + connection + ":\n" + DatabaseRows, nil
		}, tool.Idempotent())
}

func checkConnection(c string) error {
	if !connectionRE.MatchString(c) {
		return fmt.Errorf("connection %q is not a connection's name: give one such as orders-replica (lower-case letters, digits and '-', at most 48)", c)
	}
	return nil
}

// readConnection reads the connection a query tool is bound to from its state.
func readConnection(state []byte) (string, error) {
	var c Connection
	if err := json.Unmarshal(state, &c); err != nil {
		return "", fmt.Errorf("the state %q does not name a connection: call database again", state)
	}
	if err := checkConnection(c.Connection); err != nil {
		return "", err
	}
	return c.Connection, nil
}
