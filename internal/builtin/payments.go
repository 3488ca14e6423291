package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Payments group texts.
const (
	PaymentsRole        = "payments"
	PaymentsDescription = "Charge and credit accounts: tools whose effect must happen once, to try the mesh's crash recovery"
	// MaxHold bounds how long a payment tool holds its answer.
	MaxHold = time.Minute
	// EffectLog is the message a payment tool logs when its effect happens, with the
	// tool, the account, the amount and the call's idempotency key: counting these
	// lines counts the effects.
	EffectLog = "payment effect applied"
)

// Payment is the input of charge and credit.
type Payment struct {
	Account string `json:"account" jsonschema:"the account to charge or credit"`
	Cents   int    `json:"cents" jsonschema:"the amount in cents, positive"`
	HoldMS  int    `json:"hold_ms,omitempty" jsonschema:"how long to hold the answer after the effect, in milliseconds (at most 60000)"`
}

// paymentsGroup returns the payments group: charge (not idempotent: a call sent twice
// charges twice) and credit (idempotent: the worker's idempotency ledger answers a call
// sent again with the first answer). Each applies its effect, logs EffectLog, then holds
// its answer for hold_ms, whatever happens to the caller meanwhile.
func paymentsGroup(wrap Wrap) worker.Group {
	pay := func(name, done string) func(context.Context, Payment) (string, error) {
		return func(ctx context.Context, in Payment) (string, error) {
			if in.Cents <= 0 {
				return "", fmt.Errorf("cents must be positive, got %d", in.Cents)
			}
			hold := time.Duration(in.HoldMS) * time.Millisecond
			if hold < 0 || hold > MaxHold {
				return "", fmt.Errorf("hold_ms must be between 0 and %d, got %d", MaxHold.Milliseconds(), in.HoldMS)
			}
			info, _ := tool.CallInfoFrom(ctx)
			slog.InfoContext(ctx, EffectLog, "tool", name, "account", in.Account, "cents", in.Cents, "idempotency_key", info.IdempotencyKey())
			time.Sleep(hold) // the effect happened: the answer comes whether the caller waits or not
			return fmt.Sprintf("%s %d cents to %s", done, in.Cents, in.Account), nil
		}
	}
	charge := tool.MustFunc("charge", "Charge an account an amount in cents. Not idempotent: each call charges.", pay("charge", "charged"))
	credit := tool.MustFunc("credit", "Credit an account an amount in cents. Idempotent: a call delivered twice credits once.", pay("credit", "credited"), tool.Idempotent())
	return worker.Group{
		Role:        PaymentsRole,
		Description: PaymentsDescription,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{charge, credit}),
	}
}
