package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

// Error is the body of every error answer, and what the Client returns for one.
type Error struct {
	// Status is the HTTP status; it is not part of the body.
	Status int `json:"-"`
	// Message reads on its own: it names the field and, for YAML bodies, the line.
	Message string `json:"error"`
	// Field is the path of the (first) offending field, relative to the body sent.
	Field string `json:"field,omitempty"`
	// Errors lists every problem validation found.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one problem found in a body.
type FieldError struct {
	Field   string `json:"field,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// Error is the message, which names the field and the line; else the HTTP status.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
}

// String renders "line 3: services[0].port: ..." as an operator reads it.
func (f FieldError) String() string {
	var b strings.Builder
	if f.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", f.Line)
	}
	if f.Field != "" {
		b.WriteString(f.Field + ": ")
	}
	b.WriteString(f.Message)
	return b.String()
}

// invalid is a 400 answer about field ("" for the whole body); the message starts with the field.
func invalid(field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Status: http.StatusBadRequest, Message: msg, Field: field}
}

// forbiddenChange is a change the client may not make (config.APIGuard): 403.
type forbiddenChange struct{ errs config.Errors }

func (f forbiddenChange) Error() string { return f.errs.Error() }

// writeError answers with err: an *Error as it is, validation failures with 400, a forbidden
// change with 403, the engine's not-found and conflict with 404 and 409, an oversize body with
// 413, anything else with 500.
func writeError(w http.ResponseWriter, err error) {
	var answer *Error
	var tooLarge *http.MaxBytesError
	switch fields, isFields := fieldAnswer(err, ""); {
	case errors.As(err, &answer):
	case isFields:
		answer = fields
	case errors.As(err, &tooLarge):
		answer = &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)}
	case errors.Is(err, engine.ErrNotFound):
		answer = &Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, engine.ErrConflict):
		answer = &Error{Status: http.StatusConflict, Message: err.Error()}
	default:
		answer = &Error{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	_ = respond(w, answer.Status, answer)
}

// relativeTo makes the field paths of validation failures relative to at, the place in the config
// where the request body went ("services[2]", "services[2].backends[0]"); other errors pass as
// they are.
func relativeTo(at string, err error) error {
	if answer, ok := fieldAnswer(err, at); ok {
		return answer
	}
	return err
}

// fieldAnswer is the answer to validation failures (400) or a forbidden change (403), their
// paths made relative to at; ok is false for other errors.
func fieldAnswer(err error, at string) (answer *Error, ok bool) {
	var invalidConfig config.Errors
	var forbidden forbiddenChange
	switch {
	case errors.As(err, &invalidConfig):
		return fieldErrors(http.StatusBadRequest, invalidConfig, at), true
	case errors.As(err, &forbidden):
		return fieldErrors(http.StatusForbidden, forbidden.errs, at), true
	}
	return nil, false
}

// fieldErrors is the answer with status to errs, their paths made relative to at.
func fieldErrors(status int, errs config.Errors, at string) *Error {
	answer := &Error{Status: status}
	lines := make([]string, len(errs))
	for i, fe := range errs {
		f := FieldError{Field: relativePath(fe.Path, at), Line: fe.Line, Message: fe.Msg}
		answer.Errors = append(answer.Errors, f)
		lines[i] = f.String()
	}
	if len(answer.Errors) > 0 {
		answer.Field = answer.Errors[0].Field
	}
	answer.Message = strings.Join(lines, "\n")
	return answer
}

// relativePath turns "services[2].backends[1].weight" into "weight" when at is
// "services[2].backends[1]"; a path outside at stays absolute.
func relativePath(path, at string) string {
	switch {
	case at == "":
		return path
	case path == at:
		return ""
	case strings.HasPrefix(path, at+"."):
		return path[len(at)+1:]
	}
	return path
}
