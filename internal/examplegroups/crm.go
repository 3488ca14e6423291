package examplegroups

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// CRM group texts.
const (
	CRMRole        = "crm"
	CRMDescription = "Customer records: find customers, bind one to the conversation, check credit, export reports"
	CRMUsageNotes  = "Use find_customers to search, bind_customer to choose the customer the other tools work on, customer_summary to describe it."
	// CustomerType is the type name of a customer on the blackboard.
	CustomerType = "crm.Customer"
	// CustomerListType is the type name of find_customers' artifact.
	CustomerListType = "[]crm.Customer"
)

// Customer is a customer record.
type Customer struct {
	ID     int    `json:"id"`
	Name   string `json:"name"`
	City   string `json:"city"`
	Status string `json:"status"`
}

// customers is the group's fixed data set, the same on every replica.
var customers = []Customer{
	{ID: 1, Name: "Ada Lovelace", City: "London", Status: "active"},
	{ID: 2, Name: "Grace Hopper", City: "New York", Status: "active"},
	{ID: 3, Name: "Alan Turing", City: "London", Status: "blocked"},
	{ID: 4, Name: "Edsger Dijkstra", City: "Amsterdam", Status: "active"},
}

func customerByID(id int) (Customer, bool) {
	for _, c := range customers {
		if c.ID == id {
			return c, true
		}
	}
	return Customer{}, false
}

// CustomerQuery is find_customers' input.
type CustomerQuery struct {
	Query string `json:"query" jsonschema:"part of a name or a city; empty for all"`
}

// CustomerID names a customer.
type CustomerID struct {
	ID int `json:"id" jsonschema:"the customer's id"`
}

// ReportRequest is export_report's input.
type ReportRequest struct {
	Pages   int `json:"pages" jsonschema:"pages to export, 1 to 10"`
	DelayMS int `json:"delay_ms,omitempty" jsonschema:"milliseconds each page takes, at most 2000"`
}

// EscalateRequest is escalate_to_human's input.
type EscalateRequest struct {
	Reason string `json:"reason" jsonschema:"why a human must take over"`
}

// CRMGroup returns the crm group: tools that share state through the run's blackboard,
// raise control signals and report progress.
func CRMGroup() worker.Group { return crmGroup(nil) }

func crmGroup(wrap Wrap) worker.Group {
	return worker.Group{
		Role:        CRMRole,
		Description: CRMDescription,
		UsageNotes:  CRMUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{findCustomers(), bindCustomer(), customerSummary(), checkCredit(), exportReport(), escalateToHuman()}),
	}
}

// findCustomers is find_customers: customers by name or city, as a list artifact.
func findCustomers() tool.Tool {
	return tool.MustFunc("find_customers", "Find customers by name or city; the matches join the conversation's records",
		func(_ context.Context, in CustomerQuery) (tool.Result, error) {
			q := strings.ToLower(strings.TrimSpace(in.Query))
			var found []Customer
			var names []string
			for _, c := range customers {
				if q == "" || strings.Contains(strings.ToLower(c.Name), q) || strings.Contains(strings.ToLower(c.City), q) {
					found = append(found, c)
					names = append(names, fmt.Sprintf("%d %s (%s)", c.ID, c.Name, c.City))
				}
			}
			b, err := json.Marshal(found)
			if err != nil {
				return tool.Result{}, err
			}
			if found == nil {
				b = []byte("[]")
			}
			return tool.ArtifactResult(fmt.Sprintf("Found %d customer(s): %s", len(found), strings.Join(names, "; ")),
				tool.Artifact{TypeName: CustomerListType, JSON: b}), nil
		}, tool.Idempotent())
}

// bindCustomer is bind_customer: binds a customer to the blackboard.
func bindCustomer() tool.Tool {
	return tool.MustFunc("bind_customer", "Choose the customer the other tools work on, by id",
		func(ctx context.Context, in CustomerID) (string, error) {
			c, ok := customerByID(in.ID)
			if !ok {
				return "", fmt.Errorf("no customer has id %d", in.ID)
			}
			board := tool.BlackboardFrom(ctx)
			if board == nil {
				return "No run: unable to bind the customer", nil
			}
			e, err := tool.NewEntry(CustomerType, c)
			if err != nil {
				return "", err
			}
			if err := board.Bind("customer", e); err != nil {
				return "", err
			}
			return fmt.Sprintf("Customer %d (%s) bound to the blackboard as 'customer'", c.ID, c.Name), nil
		})
}

// customerSummary is customer_summary: describes the bound customer.
func customerSummary() tool.Tool {
	return tool.MustFunc("customer_summary", "Describe the customer chosen with bind_customer",
		func(ctx context.Context, _ struct{}) (string, error) {
			board := tool.BlackboardFrom(ctx)
			if board == nil {
				return "No run: no customer is bound", nil
			}
			e, ok := board.Last("Customer")
			if !ok {
				return "No customer is bound: call bind_customer first", nil
			}
			var c Customer
			if err := json.Unmarshal(e.JSON, &c); err != nil {
				return "", fmt.Errorf("the bound customer cannot be read: %w", err)
			}
			return fmt.Sprintf("%s (id %d) lives in %s; account %s", c.Name, c.ID, c.City, c.Status), nil
		}, tool.NeedsBlackboard("Customer"), tool.Idempotent())
}

// checkCredit is check_credit: replans when the customer is blocked.
func checkCredit() tool.Tool {
	return tool.MustFunc("check_credit", "Check a customer's credit before an order",
		func(_ context.Context, in CustomerID) (string, error) {
			c, ok := customerByID(in.ID)
			if !ok {
				return "", fmt.Errorf("no customer has id %d", in.ID)
			}
			if c.Status == "blocked" {
				hold, err := tool.NewEntry("crm.CreditHold", map[string]any{"customer_id": c.ID, "reason": "account blocked"})
				if err != nil {
					return "", err
				}
				// The plan assumed an orderable customer: it must be made again.
				return "", tool.ReplanRequested{Reason: fmt.Sprintf("customer %d (%s) is blocked: the order cannot go ahead", c.ID, c.Name),
					Add: []tool.Binding{{Name: "credit_hold", Entry: hold}}}
			}
			return fmt.Sprintf("Customer %d (%s): credit OK", c.ID, c.Name), nil
		}, tool.Idempotent())
}

// exportReport is export_report: reports progress page by page.
func exportReport() tool.Tool {
	return tool.MustFunc("export_report", "Export the customer report, page by page; it takes a while",
		func(ctx context.Context, in ReportRequest) (tool.Result, error) {
			if in.Pages < 1 || in.Pages > 10 {
				return tool.Error("pages must be between 1 and 10"), nil
			}
			delay := time.Duration(min(max(in.DelayMS, 0), 2000)) * time.Millisecond
			for p := 1; p <= in.Pages; p++ {
				tool.Progress(ctx, fmt.Sprintf("exporting page %d of %d", p, in.Pages))
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return tool.Result{}, ctx.Err()
				}
			}
			b, err := json.Marshal(map[string]any{"pages": in.Pages, "customers": len(customers), "url": "https://reports.example.com/customers.pdf"})
			if err != nil {
				return tool.Result{}, err
			}
			return tool.ArtifactResult(fmt.Sprintf("Exported %d page(s)", in.Pages), tool.Artifact{TypeName: "crm.Report", JSON: b}), nil
		}, tool.ReportsProgress())
}

// escalateToHuman is escalate_to_human: terminates the agent.
func escalateToHuman() tool.Tool {
	return tool.MustFunc("escalate_to_human", "Hand the conversation to a human agent and stop",
		func(_ context.Context, in EscalateRequest) (string, error) {
			return "", tool.Terminate{Scope: tool.TerminateAgent, Reason: in.Reason}
		})
}
