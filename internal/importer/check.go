package importer

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
)

// maxValidations bounds the validations of a partial import's output: each leaves out the
// services the one before refused.
const maxValidations = 4

// finish refuses a result without services (applying it would remove every service), one
// larger than Sluice reads, and one Sluice's config validation refuses, naming the source
// line of the offending service or backend; file is the source. With partial it leaves out
// the services validation refuses instead. It keeps the YAML it checked.
func (r *Result) finish(file string, partial bool) error {
	for range maxValidations {
		if len(r.Services) == 0 && len(r.Omitted) > 0 {
			return r.omittedError()
		}
		if len(r.Services) == 0 {
			return &Error{file, 1, "no service to import (applying a config without services would remove every service): nothing was printed"}
		}
		out, err := r.render()
		if err != nil {
			return err
		}
		if len(out) > MaxOutputBytes {
			return &Error{file, 1, fmt.Sprintf("the converted config takes %d bytes, more than the %s Sluice reads from a config file: import the config in parts (split the file)", len(out), boundedread.Size(MaxOutputBytes))}
		}
		_, err = config.Parse(file, out)
		if err == nil {
			r.rendered = out
			return nil
		}
		if !partial || !r.leaveOutInvalid(file, err) {
			return r.sourceErrors(file, err)
		}
	}
	return &Error{file, 1, fmt.Sprintf("the converted config still fails validation after leaving out what %d validations refused", maxValidations)}
}

// servicePath reads the service and the backend or sorry server a validation error names.
var servicePath = regexp.MustCompile(`^services\[([0-9]+)\](?:\.(backends|sorry_servers)\[([0-9]+)\])?\.?`)

// sourceErrors turns the validation errors of the converted config into errors at the lines
// of the source the services and backends come from.
func (r *Result) sourceErrors(file string, err error) error {
	var fields config.Errors
	if !errors.As(err, &fields) {
		return &Error{file, 1, fmt.Sprintf("the converted config would not load: %v", err)}
	}
	var errs problems
	for _, f := range fields {
		at, what := r.origin(file, f.Path)
		errs.add(at.file, at.line, "refused: Sluice would not take the converted %s: %s", what, f.Msg)
	}
	return errs.err()
}

// origin is the source line of the service, backend or sorry server at a config path, and
// what it names there.
func (r *Result) origin(file, path string) (pos, string) {
	m := servicePath.FindStringSubmatch(path)
	if m == nil {
		return pos{file, 1}, "config (" + path + ")"
	}
	i, _ := strconv.Atoi(m[1])
	if i >= len(r.Services) {
		return pos{file, 1}, path
	}
	s := &r.Services[i]
	at, what := s.at, "service "+s.Name
	if at.file == "" {
		at = pos{file, 1}
	}
	if m[2] != "" {
		j, _ := strconv.Atoi(m[3])
		list, kind := s.backendAt, "backend"
		if m[2] == "sorry_servers" {
			list, kind = s.sorryAt, "sorry server"
		}
		if j < len(list) {
			at = list[j]
		}
		what = fmt.Sprintf("%s %s of service %s", kind, backendText(s, m[2], j), s.Name)
	}
	if field := path[len(m[0]):]; field != "" {
		what += " (" + field + ")"
	}
	return at, what
}

// backendText is the address of a service's backend or sorry server, for an error.
func backendText(s *Service, list string, j int) string {
	backends := s.Backends
	if list == "sorry_servers" {
		backends = s.SorryServers
	}
	if j >= len(backends) {
		return fmt.Sprintf("%s[%d]", list, j)
	}
	return backends[j].Address.String()
}
