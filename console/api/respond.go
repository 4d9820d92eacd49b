package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/holdfast-bot/holdfast/store"
)

// MaxBodyBytes caps every request body (SPEC §7: at most 2 MiB, else 413).
const MaxBodyBytes = store.MaxRequestBytes

// ErrorBody is the one error shape of the API.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes the error shape with a code derived from status.
func WriteError(w http.ResponseWriter, status int, message string) {
	var b ErrorBody
	b.Error.Code = codeFor(status)
	b.Error.Message = message
	WriteJSON(w, status, b)
}

func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusServiceUnavailable:
		return "unavailable"
	default:
		return "internal"
	}
}

// Fail maps err to its status and writes it, once for every route: the
// store's sentinels pick the status, a Refusal's reason is the message.
// Unexpected errors are logged and their text withheld from the caller.
func Fail(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusNotFound, store.ReasonOf(err))
	case errors.Is(err, store.ErrConflict):
		WriteError(w, http.StatusConflict, store.ReasonOf(err))
	case errors.Is(err, store.ErrTooLarge):
		WriteError(w, http.StatusRequestEntityTooLarge, store.ReasonOf(err))
	case errors.Is(err, store.ErrInvalid):
		WriteError(w, http.StatusBadRequest, store.ReasonOf(err))
	case errors.Is(err, store.ErrForbidden):
		WriteError(w, http.StatusForbidden, store.ReasonOf(err))
	default:
		log.ErrorContext(r.Context(), "request failed", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		WriteError(w, http.StatusInternalServerError, "internal error")
	}
}

// Invalidf builds a store.ErrInvalid with the sentence to show.
func Invalidf(format string, args ...any) error {
	return store.Refuse(store.ErrInvalid, format, args...)
}

// Decode reads a JSON body into v: 415 unless the body is JSON, 413 past
// MaxBodyBytes, 400 for malformed JSON, unknown fields, or text that is not
// UTF-8 or holds NUL (SPEC §7). The text rules are checked on the raw bytes,
// because encoding/json would silently replace invalid UTF-8 and decode
// \u0000 into a NUL. It writes the error itself and reports whether
// decoding succeeded.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		WriteError(w, http.StatusUnsupportedMediaType, "request body must be Content-Type: application/json")
		return false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
			return false
		}
		WriteError(w, http.StatusBadRequest, "unreadable request body")
		return false
	}
	if !utf8.Valid(raw) {
		WriteError(w, http.StatusBadRequest, "request body is not valid UTF-8")
		return false
	}
	if msg := badEscape(raw); msg != "" {
		WriteError(w, http.StatusBadRequest, msg)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		WriteError(w, http.StatusBadRequest, decodeError(err))
		return false
	}
	if msg := miscased(raw, v); msg != "" {
		WriteError(w, http.StatusBadRequest, msg)
		return false
	}
	if dec.More() {
		WriteError(w, http.StatusBadRequest, "malformed JSON: trailing data after the object")
		return false
	}
	return true
}

// badEscape answers why JSON text's first refused \u escape is refused, or
// "": \u0000 (a NUL), or a UTF-16 surrogate outside a pair, which
// encoding/json would store as U+FFFD, silently changing the text.
// Backslashes appear only inside strings, each starting an escape, so
// skipping escapes as they come is exact ("\\u0000" is a backslash and
// "u0000"). A raw NUL byte is not valid JSON and the decoder refuses it.
func badEscape(b []byte) string {
	for i := 0; i < len(b)-1; i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := uEscape(b[i:])
		switch {
		case !ok:
			i++ // another escape, or a broken one the decoder refuses
			continue
		case r == 0:
			return "the request body holds a NUL character (\\u0000); text may not contain NUL"
		case utf16.IsSurrogate(r):
			if lo, ok := uEscape(b[i+6:]); ok && utf16.DecodeRune(r, lo) != unicode.ReplacementChar {
				i += 6 // a pair: one character
				break
			}
			return fmt.Sprintf("the request body holds a lone UTF-16 surrogate (%s), which is no character; text must be valid Unicode", b[i:i+6])
		}
		i += 5
	}
	return ""
}

// uEscape decodes a \uXXXX escape at the start of b.
func uEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return rune(n), err == nil
}

// decodeError is the sentence for a body encoding/json could not decode,
// in the request's own field names: Go's message names Go types.
func decodeError(err error) string {
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case errors.As(err, &typeErr):
		got, _, _ := strings.Cut(typeErr.Value, " ") // "number 7"
		got = jsonKinds[got]
		field := strings.TrimPrefix(typeErr.Field, ".")
		if field == "" {
			return fmt.Sprintf("the request body must be %s, not %s", wantKind(typeErr.Type), got)
		}
		return fmt.Sprintf("%s: expected %s, got %s", field, wantKind(typeErr.Type), got)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.Is(err, io.EOF):
		return "the request body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the body ends before the JSON does"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if strings.HasPrefix(msg, "unknown field") {
		return msg // unknown field "author"
	}
	return "malformed JSON: " + msg
}

// miscased answers the refusal of a body whose top-level field names match
// v's only ignoring case ("Title"), or "": encoding/json takes them, so
// without this a client's typo would half work while a misspelt field is
// refused.
func miscased(raw []byte, v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return ""
	}
	names := jsonNames(t)
	for k := range fields {
		if names[k] {
			continue
		}
		for n := range names {
			if strings.EqualFold(k, n) {
				return fmt.Sprintf("unknown field %q; field names are case-sensitive: %q", k, n)
			}
		}
	}
	return ""
}

// jsonNames is the set of field names t is decoded from, embedded
// structs' included.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			for n := range jsonNames(f.Type) {
				names[n] = true
			}
		case name != "":
			names[name] = true
		case f.IsExported():
			names[f.Name] = true
		}
	}
	return names
}

// jsonKinds names the JSON values encoding/json reports.
var jsonKinds = map[string]string{"string": "a string", "number": "a number", "bool": "true or false",
	"array": "a list", "object": "an object", "null": "null"}

// wantKind names the JSON a Go type is decoded from.
func wantKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map:
		return "an object"
	case reflect.Struct:
		return "a JSON object"
	case reflect.Interface:
		return "a value"
	}
	return "a number"
}

// limitBody is the API's body limit, before anything else reads the
// request: a declared length past MaxBodyBytes is 413 at once, and any body
// read later stops at MaxBodyBytes (Decode answers 413 then).
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// checkQuery refuses a query string that does not parse (SPEC §7: a
// malformed cursor such as cursor=%% is 400, never a silent first page):
// url.Values drops what it cannot decode, so the raw query is checked once,
// here, for every route.
func checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			WriteError(w, http.StatusBadRequest, "malformed query string: "+err.Error())
			return
		}
		if err := store.CheckFields("query parameter", q); err != nil {
			WriteError(w, http.StatusBadRequest, store.ReasonOf(err))
			return
		}
		next.ServeHTTP(w, r)
	})
}
