package examplegroups

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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

// Effects records the payment tools' effects, so that they can be counted (and so that
// credit can be idempotent): Apply records one effect of tool under the call's
// idempotency key, unless once is set and the key has one already; applied reports
// whether it did. Replicas of the group that share an Effects share the guarantee.
type Effects interface {
	Apply(ctx context.Context, tool, key string, once bool) (applied bool, err error)
}

// memoryEffects is Effects in this process.
type memoryEffects struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (m *memoryEffects) Apply(_ context.Context, tool, key string, once bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := tool + "\x00" + key
	if once && key != "" && m.seen[k] {
		return false, nil
	}
	m.seen[k] = true
	return true, nil
}

// paymentsGroup returns the payments group with its effects in memory.
func paymentsGroup(wrap Wrap) worker.Group {
	return PaymentsGroup(wrap, &memoryEffects{seen: map[string]bool{}})
}

// PaymentsGroup returns the payments group recording its effects in effects: charge
// (not idempotent: each call charges) and credit (idempotent: a call whose idempotency
// key was credited before credits nothing more). Each applies its effect, logs
// EffectLog when it applied one, then holds its answer for hold_ms, whatever happens to
// the caller meanwhile.
func PaymentsGroup(wrap Wrap, effects Effects) worker.Group {
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
			key := info.IdempotencyKey()
			applied, err := effects.Apply(context.WithoutCancel(ctx), name, key, name == "credit")
			if err != nil {
				return "", fmt.Errorf("the payment could not be recorded: %w", err)
			}
			if applied {
				slog.InfoContext(ctx, EffectLog, "tool", name, "account", in.Account, "cents", in.Cents, "idempotency_key", key)
			}
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
