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
	if hasNULEscape(raw) {
		WriteError(w, http.StatusBadRequest, "request body holds a NUL character (\\u0000); text may not contain NUL")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		WriteError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return false
	}
	if dec.More() {
		WriteError(w, http.StatusBadRequest, "malformed JSON: trailing data after the object")
		return false
	}
	return true
}

// hasNULEscape reports whether JSON text holds a \u0000 escape. Backslashes
// appear only inside strings, each starting an escape, so skipping escaped
// characters pairwise is exact ("\\u0000" is a backslash and "u0000"). A raw
// NUL byte is not valid JSON and the decoder refuses it.
func hasNULEscape(b []byte) bool {
	for i := 0; i < len(b)-1; i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			return true
		}
		i++
	}
	return false
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
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}
