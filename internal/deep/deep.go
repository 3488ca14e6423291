// Package deep runs a piece of work that grows a deep stack on a goroutine of its own,
// so that the stack goes with the work instead of staying with a goroutine that lives
// long and mostly waits (a Run stream's, which waits for the run's model for as long as
// it takes). The runtime gives a goroutine's stack back only at a garbage collection,
// and only when it uses under a quarter of it: a stack grown once by a deep call stays
// that size while its goroutine waits.
package deep

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Run runs fn on a goroutine of its own and waits for it. A panic in fn is raised again
// in the caller, with fn's stack (a *Panic); fn calling runtime.Goexit ends the caller's
// goroutine too.
func Run(fn func()) {
	done := make(chan *Panic, 1)
	go func() {
		finished := false
		defer func() {
			switch v := recover(); {
			case v != nil:
				done <- &Panic{Value: v, Stack: debug.Stack()}
			case !finished:
				done <- errGoexit
			}
			close(done)
		}()
		fn()
		finished = true
	}()
	switch p := <-done; {
	case p == errGoexit:
		runtime.Goexit()
	case p != nil:
		panic(p)
	}
}

// errGoexit tells Run's caller that its work called runtime.Goexit.
var errGoexit = &Panic{Value: "runtime.Goexit"}

// Panic is a panic of a piece of work Run ran, raised again in its caller.
type Panic struct {
	Value any
	Stack []byte
}

func (p *Panic) Error() string { return fmt.Sprintf("%v\n\n%s", p.Value, p.Stack) }
