package examplegroups

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The users group shows tool chaining across the mesh: find_user returns a User, and
// the methods of User (updateEmail, profile) then run on it, on any replica, with the
// object the orchestrator bound as their receiver.
const (
	UsersRole        = "users"
	UsersDescription = "User accounts: find a user, then read or change the user found"
	// UserType is the type name of a user: find_user's artifact, the methods' receiver.
	UserType = "users.User"
)

// User is a user account.
type User struct {
	ID    int    `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
}

// users is the group's fixed data set, the same on every replica.
var users = []User{
	{ID: 1, Name: "Ada Lovelace", Email: "ada@example.com"},
	{ID: 2, Name: "Grace Hopper", Email: "grace@example.com"},
}

// UserQuery is find_user's input.
type UserQuery struct {
	Name string `json:"name" jsonschema:"part of the user's name"`
}

// EmailChange is updateEmail's input.
type EmailChange struct {
	Email string `json:"email" jsonschema:"the new email address"`
}

// Users returns the users group.
func Users() worker.Group { return usersGroup(nil) }

func usersGroup(wrap Wrap) worker.Group {
	find := tool.MustFunc("find_user", "Find a user by name",
		func(_ context.Context, in UserQuery) (tool.Result, error) {
			q := strings.ToLower(strings.TrimSpace(in.Name))
			for _, u := range users {
				if q != "" && strings.Contains(strings.ToLower(u.Name), q) {
					b, err := json.Marshal(u)
					if err != nil {
						return tool.Result{}, err
					}
					return tool.ArtifactResult(fmt.Sprintf("Found user %d: %s <%s>", u.ID, u.Name, u.Email),
						tool.Artifact{TypeName: UserType, JSON: b}), nil
				}
			}
			return tool.Result{}, fmt.Errorf("no user's name contains %q", in.Name)
		}, tool.Idempotent())

	update := tool.MustFunc("updateEmail", "Change the email address of the user found",
		func(ctx context.Context, in EmailChange) (string, error) {
			var u User
			if err := tool.ReceiverFrom(ctx, &u); err != nil {
				return "", err
			}
			if !strings.Contains(in.Email, "@") {
				return "", fmt.Errorf("%q is not an email address", in.Email)
			}
			old := u.Email
			u.Email = in.Email
			if err := tool.SetReceiver(ctx, u); err != nil {
				return "", err
			}
			return fmt.Sprintf("The email of %s changed from %s to %s", u.Name, old, u.Email), nil
		}, tool.MethodOf(UserType))

	profile := tool.MustFunc("profile", "Describe the user found",
		func(ctx context.Context, _ struct{}) (string, error) {
			var u User
			if err := tool.ReceiverFrom(ctx, &u); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s (id %d) <%s>", u.Name, u.ID, u.Email), nil
		}, tool.MethodOf(UserType), tool.Idempotent())

	return worker.Group{
		Role:        UsersRole,
		Description: UsersDescription,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{find, update, profile}),
		DomainTypes: []tool.DomainType{tool.MustDomainTypeFor[User](UserType, "A user account: id, name and email")},
	}
}
