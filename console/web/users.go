package web

import (
	"errors"
	"net/http"
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
			Created: c.ago(u.CreatedAt), IsSelf: u.ID == me.UserID})
	}
	v.Roles = roles
	if v.Form.Role == "" {
		v.Form.Role = store.RoleViewer
	}
	v.Page = c.page(w, r, "Users", "users")
	c.render(w, r, status, templates.UsersPage(v))
}

func (c *Console) userList(w http.ResponseWriter, r *http.Request) {
	c.renderUsers(w, r, http.StatusOK, templates.UsersView{})
}

func (c *Console) userCreate(w http.ResponseWriter, r *http.Request) {
	var v templates.UsersView
	v.Form.Username = strings.TrimSpace(r.PostFormValue("username"))
	v.Form.Role = r.PostFormValue("role")
	v.Form.SlackUserID = strings.TrimSpace(r.PostFormValue("slack_user_id"))
	password := r.PostFormValue("password")
	switch {
	case store.CheckUsername(v.Form.Username) != nil:
		v.Error = "A username is 1 to 500 characters without spaces."
	case len(password) < 8:
		v.Error = "A password needs at least 8 characters."
	case !store.ValidRole(v.Form.Role):
		v.Error = "Choose a role: viewer, steward or admin."
	}
	if v.Error != "" {
		c.renderUsers(w, r, http.StatusBadRequest, v)
		return
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	_, err = c.Store.UserCreate(r.Context(), &store.User{Username: v.Form.Username, PasswordHash: string(hash),
		Role: v.Form.Role, SlackUserID: v.Form.SlackUserID})
	if errors.Is(err, store.ErrConflict) {
		v.Error = "That username or Slack user ID is already taken."
		c.renderUsers(w, r, http.StatusConflict, v)
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, "/users", "Added "+v.Form.Username+" as "+v.Form.Role+".", false)
}

func (c *Console) userRole(w http.ResponseWriter, r *http.Request) {
	id, role := chi.URLParam(r, "id"), r.PostFormValue("role")
	if !store.ValidRole(role) {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "role must be viewer, steward or admin")
		return
	}
	if id == identity(r).UserID {
		// Demoting yourself could leave no admin at all; another admin can.
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", "You cannot change your own role.")
		return
	}
	u, err := c.Store.UserRoleSet(r.Context(), id, role)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.redirect(w, r, "/users", u.Username+" is now "+role+".", false)
}
