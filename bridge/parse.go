package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Envelope is the outer JSON of an Events API delivery, its inner event
// decoded in the same pass: the ack path needs the event's thread, and
// decoding the body once instead of keeping the event raw and decoding it
// again was a tenth of the ingest path's CPU.
type Envelope struct {
	Type           string   `json:"type"`
	EventID        string   `json:"event_id"`
	Challenge      string   `json:"challenge"`
	Event          *Message `json:"event"`
	Authorizations []struct {
		UserID string `json:"user_id"`
		IsBot  bool   `json:"is_bot"`
	} `json:"authorizations"`
	// EventErr is why the inner event is not a Message (a field of
	// another type): the delivery is still stored and acknowledged, then
	// set aside as one Holdfast could not handle, an edge to look at.
	EventErr error `json:"-"`
}

// ParseEnvelope decodes and checks an Events API body: a url_verification
// needs its challenge, an event_callback its event_id and event.
func ParseEnvelope(body []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || !strings.HasPrefix(te.Field, "event.") {
			return nil, fmt.Errorf("malformed event JSON: %w", err)
		}
		env.EventErr = fmt.Errorf("malformed inner event: %w", err)
	}
	switch env.Type {
	case "url_verification":
		if env.Challenge == "" {
			return nil, errors.New("url_verification without a challenge")
		}
	case "event_callback":
		if env.EventID == "" {
			return nil, errors.New("event_callback without an event_id")
		}
		if env.Event == nil {
			return nil, errors.New("event_callback without an event object")
		}
	case "":
		return nil, errors.New("event without a type")
	}
	return &env, nil
}

// Message is the inner event of an app_mention or message delivery.
type Message struct {
	Type        string `json:"type"` // app_mention | message
	Subtype     string `json:"subtype"`
	Channel     string `json:"channel"`
	ChannelType string `json:"channel_type"` // channel | group | im | mpim
	User        string `json:"user"`
	BotID       string `json:"bot_id"`
	Text        string `json:"text"`
	TS          string `json:"ts"`
	ThreadTS    string `json:"thread_ts"`
	Tab         string `json:"tab"` // app_home_opened: home | messages
	// Changed is the message as it now reads (subtype message_changed);
	// Previous as it read before (message_changed, message_deleted),
	// DeletedTS the ts of the message deleted.
	Changed   *Message `json:"message"`
	Previous  *Message `json:"previous_message"`
	DeletedTS string   `json:"deleted_ts"`
}

// Message subtypes of a change to a message said earlier.
const (
	subtypeChanged = "message_changed"
	subtypeDeleted = "message_deleted"
)

// Target is the message an edit or deletion changes, placed in the
// event's channel; nil for any other event.
func (m *Message) Target() *Message {
	var t *Message
	switch m.Subtype {
	case subtypeChanged:
		t = m.Changed
	case subtypeDeleted:
		t = m.Previous
	}
	if t == nil {
		return nil
	}
	c := *t
	c.Channel, c.ChannelType, c.Changed, c.Previous = m.Channel, m.ChannelType, nil, nil
	if m.Subtype == subtypeDeleted && m.DeletedTS != "" {
		c.TS = m.DeletedTS
	}
	return &c
}

// Root is the ts of the thread the message belongs to: a top-level message
// starts a thread on its own ts.
func (m *Message) Root() string {
	if m.ThreadTS != "" {
		return m.ThreadTS
	}
	return m.TS
}

// Interaction is the part of an interactivity payload the bridge reads:
// block_actions (card and App Home buttons), view_submission (the review
// and run-workflow modals) and message_action (the run_workflow shortcut).
type Interaction struct {
	Type       string `json:"type"`
	CallbackID string `json:"callback_id"` // message_action
	TriggerID  string `json:"trigger_id"`
	View       View   `json:"view"` // view_submission; block_actions in a view (App Home)
	User       struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		Name     string `json:"name"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Container struct {
		Type      string `json:"type"` // message | view
		ChannelID string `json:"channel_id"`
		MessageTS string `json:"message_ts"`
		ThreadTS  string `json:"thread_ts"`
	} `json:"container"`
	Message struct {
		TS       string `json:"ts"`
		ThreadTS string `json:"thread_ts"`
		Text     string `json:"text"`
		User     string `json:"user"`
	} `json:"message"`
	Actions []struct {
		ActionID string `json:"action_id"`
		BlockID  string `json:"block_id"`
		Value    string `json:"value"`
	} `json:"actions"`
}

// View is the part of a view in an interaction payload the bridge reads.
type View struct {
	ID              string `json:"id"`
	Type            string `json:"type"` // modal | home
	CallbackID      string `json:"callback_id"`
	PrivateMetadata string `json:"private_metadata"`
	State           struct {
		// Values holds each input's value by block_id and action_id.
		Values map[string]map[string]ViewValue `json:"values"`
	} `json:"state"`
}

// ViewValue is one input's state: a text input's value, or a radio
// button's or select's chosen option.
type ViewValue struct {
	Type           string `json:"type"`
	Value          string `json:"value"`
	SelectedOption struct {
		Value string `json:"value"`
	} `json:"selected_option"`
}

// Input answers the value of the input blockID/actionID: a text's value or
// an option's value ("" when absent).
func (v *View) Input(blockID, actionID string) string {
	x := v.State.Values[blockID][actionID]
	if x.Value != "" {
		return x.Value
	}
	return x.SelectedOption.Value
}

// ParseInteraction decodes an interactivity payload (the JSON in the
// `payload` form field, or a Socket Mode envelope's payload).
func ParseInteraction(payload []byte) (*Interaction, error) {
	var in Interaction
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, fmt.Errorf("malformed interaction JSON: %w", err)
	}
	if in.Type == "" {
		return nil, errors.New("interaction without a type")
	}
	switch in.Type {
	case "block_actions", "view_submission", "message_action":
		if in.User.ID == "" {
			return nil, fmt.Errorf("%s without a user", in.Type)
		}
	}
	return &in, nil
}

// ChannelID is where the clicked message lives.
func (in *Interaction) ChannelID() string {
	if in.Channel.ID != "" {
		return in.Channel.ID
	}
	return in.Container.ChannelID
}

// ThreadTS is the thread of the clicked message ("" for a top-level card).
func (in *Interaction) ThreadTS() string {
	if in.Message.ThreadTS != "" {
		return in.Message.ThreadTS
	}
	return in.Container.ThreadTS
}

var mentionRE = regexp.MustCompile(`[ \t]*<@([UW][A-Z0-9]+)(\|[^>]*)?>[ \t]*`)

// stripMention removes mentions of botUserID (all mentions when unknown)
// and tidies the space they leave.
func stripMention(text, botUserID string) string {
	text = mentionRE.ReplaceAllStringFunc(text, func(m string) string {
		id := mentionRE.FindStringSubmatch(m)[1]
		if botUserID == "" || id == botUserID {
			return " " // the spaces around it, too: "hey <@B> you" is "hey you"
		}
		return m
	})
	return strings.TrimSpace(text)
}

// mentions reports whether text mentions botUserID.
func mentions(text, botUserID string) bool {
	if botUserID == "" {
		return false
	}
	for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
		if m[1] == botUserID {
			return true
		}
	}
	return false
}

// Command is a parsed mention command.
type Command struct {
	Name string // lower-case first word, without a leading slash
	Arg  string // the rest, trimmed
}

// ParseCommand splits the text after the mention into its first word and
// the rest. Slack unescapes nothing for us: &amp; &lt; &gt; are turned back
// into characters in the argument, which goes to workflows as plain text.
func ParseCommand(text string) Command {
	text = strings.TrimSpace(text)
	name, rest := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		name, rest = text[:i], text[i:]
	}
	name = strings.ToLower(strings.TrimPrefix(name, "/"))
	return Command{Name: name, Arg: strings.TrimSpace(unescape(rest))}
}

var unescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

func unescape(s string) string { return unescaper.Replace(s) }
