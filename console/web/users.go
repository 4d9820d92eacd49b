package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/templates"
)

var roles = []string{store.RoleViewer, store.RoleSteward, store.RoleAdmin}

func (c *Console) renderUsers(w http.ResponseWriter, r *http.Request, status int, v templates.UsersView) {
	users, err := c.Store.UserList(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	me := identity(r)
	for _, u := range users {
		v.Rows = append(v.Rows, templates.UserRow{ID: u.ID, Username: u.Username, Role: u.Role, SlackUserID: u.SlackUserID,
			Disabled: u.Disabled, Created: c.ago(u.CreatedAt), IsSelf: u.ID == me.UserID})
	}
	v.Roles = roles
	if v.Form.Role == "" {
		v.Form.Role = store.RoleViewer
	}
	v.Page = c.page(w, r, "Users", "users")
	c.render(w, r, status, templates.UsersPage(v))
}

func (c *Console) userList(w http.ResponseWriter, r *http.Request) {
	var v templates.UsersView
	// A refused add comes back here (post/redirect/get) with what was typed,
	// except the password.
	q := r.URL.Query()
	v.Form.Username, v.Form.Role, v.Form.SlackUserID = q.Get("username"), q.Get("role"), q.Get("slack_user_id")
	c.renderUsers(w, r, http.StatusOK, v)
}

func (c *Console) userCreate(w http.ResponseWriter, r *http.Request) {
	username := strings.TrimSpace(r.PostFormValue("username"))
	role := r.PostFormValue("role")
	slackID := strings.TrimSpace(r.PostFormValue("slack_user_id"))
	password := r.PostFormValue("password")
	again := func(msg string) {
		q := url.Values{"username": {username}, "role": {role}}
		if slackID != "" {
			q.Set("slack_user_id", slackID)
		}
		c.redirect(w, r, "/users?"+q.Encode(), msg, true)
	}
	switch {
	case store.CheckUsername(username) != nil:
		again("A username is 1 to 500 characters without spaces.")
		return
	case len(password) < 8:
		again("A password needs at least 8 characters.")
		return
	case !store.ValidRole(role):
		again("Choose a role: viewer, steward or admin.")
		return
	case store.CheckSlackUserID(slackID) != nil:
		again(store.ReasonOf(store.CheckSlackUserID(slackID)) + ".")
		return
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	_, err = c.Store.UserCreate(r.Context(), &store.User{Username: username, PasswordHash: string(hash), Role: role, SlackUserID: slackID})
	if errors.Is(err, store.ErrConflict) {
		again("That username or Slack user ID is already taken.")
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, "/users", "Added "+username+" as "+role+".", false)
}

func (c *Console) userRole(w http.ResponseWriter, r *http.Request) {
	id, role := chi.URLParam(r, "id"), r.PostFormValue("role")
	if !store.ValidRole(role) {
		c.redirect(w, r, "/users", "A role is viewer, steward or admin.", true)
		return
	}
	if id == identity(r).UserID {
		// Demoting yourself could leave no admin at all; another admin can.
		c.redirect(w, r, "/users", "You cannot change your own role; another admin can.", true)
		return
	}
	u, err := c.Store.UserRoleSet(r.Context(), id, role)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, "/users", u.Username+" is now "+role+".", false)
}

// userDisabled disables or enables a user; disabling ends their sign-ins at
// once (the store deletes their sessions, and a disabled user's cookie no
// longer authenticates).
func (c *Console) userDisabled(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	disabled := r.PostFormValue("disabled") == "true"
	if id == identity(r).UserID {
		c.redirect(w, r, "/users", "You cannot disable yourself; another admin can.", true)
		return
	}
	u, err := c.Store.UserDisabledSet(r.Context(), id, disabled)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	msg := u.Username + " is enabled again."
	if disabled {
		msg = u.Username + " is disabled: they cannot sign in, and their sign-ins have ended."
	}
	c.redirect(w, r, "/users", msg, false)
}

// userPassword sets a user's password (an admin's reset); their sign-ins
// end, the admin's own included when it is theirs.
func (c *Console) userPassword(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	password := r.PostFormValue("password")
	if len(password) < 8 {
		c.redirect(w, r, "/users", "A password needs at least 8 characters.", true)
		return
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	u, err := c.Store.UserPasswordSet(r.Context(), id, string(hash))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if id == identity(r).UserID {
		c.redirect(w, r, "/login", "Your password is changed; sign in with it.", false)
		return
	}
	c.redirect(w, r, "/users", "The password of "+u.Username+" is reset; their sign-ins have ended.", false)
}
