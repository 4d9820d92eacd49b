package workflow

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// MarshalJSON writes the policy's durations as Go duration strings ("2m0s")
// rather than nanosecond counts: the manifest is shown to people on the run
// page and in the API, where 120000000000 means nothing.
func (p Policy) MarshalJSON() ([]byte, error) {
	type plain Policy // no methods: avoids recursing into MarshalJSON
	return json.Marshal(struct {
		plain
		Timeout     string `json:"timeout"`
		HoldTimeout string `json:"holdTimeout"`
		RemindAfter string `json:"remindAfter"`
	}{plain(p), p.Timeout.String(), p.HoldTimeout.String(), p.RemindAfter.String()})
}

// UnmarshalJSON reads durations written either way: as strings, and as the
// nanosecond integers of manifests stored before MarshalJSON existed (a run
// resumed or recovered after an upgrade decodes its stored manifest).
func (p *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy
	aux := struct {
		*plain
		Timeout     jsonDuration `json:"timeout"`
		HoldTimeout jsonDuration `json:"holdTimeout"`
		RemindAfter jsonDuration `json:"remindAfter"`
	}{plain: (*plain)(p), Timeout: jsonDuration(p.Timeout), HoldTimeout: jsonDuration(p.HoldTimeout),
		RemindAfter: jsonDuration(p.RemindAfter)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	p.Timeout, p.HoldTimeout = time.Duration(aux.Timeout), time.Duration(aux.HoldTimeout)
	p.RemindAfter = time.Duration(aux.RemindAfter)
	return nil
}

// jsonDuration decodes "2m0s" or a nanosecond count.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	switch {
	case string(b) == "null":
		return nil
	case json.Unmarshal(b, &s) == nil:
		dur, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("policy duration: %w", err)
		}
		*d = jsonDuration(dur)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("policy duration: want a string like \"2m\" or nanoseconds, got %s", b)
	}
	*d = jsonDuration(n)
	return nil
}

// MarshalJSON writes Every as a duration string, like Policy's durations.
func (s Schedule) MarshalJSON() ([]byte, error) {
	type plain Schedule
	every := ""
	if s.Every > 0 {
		every = s.Every.String()
	}
	return json.Marshal(struct {
		plain
		Every string `json:"every,omitempty"`
	}{plain(s), every})
}

// UnmarshalJSON reads Every as a string or as stored nanoseconds.
func (s *Schedule) UnmarshalJSON(b []byte) error {
	type plain Schedule
	aux := struct {
		*plain
		Every jsonDuration `json:"every"`
	}{plain: (*plain)(s), Every: jsonDuration(s.Every)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	s.Every = time.Duration(aux.Every)
	return nil
}
