package agentic

import (
	"fmt"
	"strings"
)

// The texts the model reads. They are part of the behaviour: tests pin each one.

// DefaultSystemPrompt is the system prompt of a simple agentic tool without one of its
// own.
func DefaultSystemPrompt(description string) string {
	return "You are an intelligent agent that can use tools to help you complete tasks. Use the provided tools to perform the following task: " + description
}

// PlaybookSystemPrompt is the default system prompt of a playbook.
func PlaybookSystemPrompt(description string) string {
	return DefaultSystemPrompt(description) + "\n\nNote: Some tools may require certain prerequisites before they become available.\nIf a tool indicates it is not yet available, use the required prerequisite tools first."
}

// StateMachineSystemPrompt is the default system prompt of a state machine, in the state
// it starts in.
func StateMachineSystemPrompt(description, state string) string {
	return "You are an intelligent agent that can use tools to complete tasks.\n\nCurrent state: " + state + "\n\nTask: " + description +
		"\n\nUse the available tools to complete the task. Some tools are only available\nin certain states. If a tool indicates it's not available in the current state,\nyou may need to use other tools first to transition to the appropriate state."
}

// AgentDescription is the description of a subagent declared without one.
func AgentDescription(name string) string { return "Delegate to agent '" + name + "'" }

// lockedPrefix starts the answer of a locked playbook tool.
const lockedPrefix = "This tool is not yet available. "

// The hints of a locked playbook tool, by condition.
const (
	hintAllOf     = "Multiple conditions must be met before this tool is available."
	hintAnyOf     = "At least one prerequisite condition must be met."
	hintPredicate = "Prerequisites have not been met yet."
)

func hintAfterTools(missing []string) string {
	return "You must first use: " + strings.Join(missing, ", ")
}

func hintArtifact(typeName string) string {
	return "You must first produce an artifact of type: " + typeName
}

// stateNote is appended to the description of a tool available in some states.
func stateNote(states []string, targets map[string]string) string {
	var b strings.Builder
	if len(states) == 1 {
		b.WriteString("[Available in state: " + states[0] + "]")
	} else {
		b.WriteString("[Available in states: " + strings.Join(states, ", ") + "]")
	}
	var to []string
	distinct := map[string]bool{}
	moving := 0
	for _, s := range states {
		if t := targets[s]; t != "" {
			distinct[t] = true
			moving++
		}
	}
	switch {
	case len(distinct) == 0:
	case len(distinct) == 1 && moving == len(states):
		for t := range distinct {
			to = append(to, t)
		}
	default:
		for _, s := range states {
			if t := targets[s]; t != "" {
				to = append(to, t+" from "+s)
			}
		}
	}
	if len(to) > 0 {
		b.WriteString(" [Transitions to: " + strings.Join(to, ", ") + "]")
	}
	return b.String()
}

// globalNote is appended to the description of a state machine's global tool.
const globalNote = "[Available in all states]"

func wrongState(current string, states []string) string {
	if len(states) == 1 {
		return fmt.Sprintf("This tool is not available in the current state (%s). It is only available in state: %s", current, states[0])
	}
	return fmt.Sprintf("This tool is not available in the current state (%s). It is only available in states: %s", current, strings.Join(states, ", "))
}

// noContext is the error of an agentic tool called outside a run.
const noContext = "No AgentProcess context available"
