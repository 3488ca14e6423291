package credentials

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// Bounds of a secret store.
const (
	// MaxSecretBytes bounds one secret file.
	MaxSecretBytes = 16 << 10
	// maxTenantsKept bounds the tenants whose files a store keeps in memory.
	maxTenantsKept = 4096
)

// tenantDirRE is a tenant name that may name a directory: no separator, no dot first
// (not "..", not Kubernetes' own "..data").
var tenantDirRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,252}$`)

// SecretOptions configure a SecretStore.
type SecretOptions struct {
	// Group is the tool group the secrets are for (in messages and logs).
	Group string
	// Dir holds a directory per tenant: Dir/<tenant>/<file>.
	Dir string
	// Reload is how often a tenant's files are checked for a change (default 1s; a
	// negative value checks on every use).
	Reload time.Duration
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// SecretStore reads a group's secrets per tenant from files, Dir/<tenant>/<file>, and
// reads a file again when it changes: rewritten in place, or replaced (Kubernetes
// updates a mounted Secret by swapping a symbolic link to a new directory at once). A
// tenant reads only its own directory. It is safe for concurrent use.
type SecretStore struct {
	opts SecretOptions
	log  *slog.Logger

	mu      sync.Mutex
	tenants map[string]*tenantSecrets
}

// tenantSecrets are the files of one tenant read so far.
type tenantSecrets struct {
	files map[string]secretValue
}

// secretValue is a file's content, the file it was read from and when that was last
// checked.
type secretValue struct {
	id      fileID
	value   string
	checked time.Time
}

// NewSecretStore returns a store over opts.Dir, which must be a directory.
func NewSecretStore(opts SecretOptions) (*SecretStore, error) {
	fi, err := os.Stat(opts.Dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", opts.Dir)
	}
	if opts.Reload == 0 {
		opts.Reload = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &SecretStore{opts: opts, log: opts.Logger.With("group", opts.Group), tenants: map[string]*tenantSecrets{}}, nil
}

// Get is the content of tenant's file (without a final line end). Its error is written
// for the model and names no path; the log has the rest.
func (s *SecretStore) Get(ctx context.Context, tenant, file string) (string, error) {
	if tenant == "" {
		return "", fmt.Errorf("%w: group '%s' takes credentials per tenant, and this call has no verified tenant", ErrNoSecret, s.opts.Group)
	}
	if !tenantDirRE.MatchString(tenant) {
		return "", fmt.Errorf("%w: tenant %q cannot have credentials for group '%s': its name cannot name a directory", ErrNoSecret, printable(tenant, 64), s.opts.Group)
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[tenant]
	if t == nil {
		if len(s.tenants) >= maxTenantsKept {
			for k := range s.tenants { // forget one: it is read again on its next use
				delete(s.tenants, k)
				break
			}
		}
		t = &tenantSecrets{files: map[string]secretValue{}}
		s.tenants[tenant] = t
	}
	if v, ok := t.files[file]; ok && now.Sub(v.checked) < s.opts.Reload {
		return v.value, nil
	}
	path := filepath.Join(s.opts.Dir, tenant, file)
	v, err := s.load(path, t.files[file])
	if err != nil {
		delete(t.files, file)
		if errors.Is(err, fs.ErrNotExist) {
			s.log.WarnContext(ctx, "no secret for the tenant", "tenant", tenant, "path", path)
		} else {
			s.log.WarnContext(ctx, "a tenant's secret cannot be read", "tenant", tenant, "path", path, "error", err.Error())
		}
		return "", fmt.Errorf("%w: tenant '%s' has no usable credentials for group '%s'; an operator must provide them", ErrNoSecret, tenant, s.opts.Group)
	}
	if v.id != t.files[file].id {
		s.log.InfoContext(ctx, "tenant's secret loaded", "tenant", tenant, "file", file)
	}
	v.checked = now
	t.files[file] = v
	return v.value, nil
}

// load reads path unless it is still the file old was read from.
func (s *SecretStore) load(path string, old secretValue) (secretValue, error) {
	id, err := statID(path)
	if err != nil {
		return secretValue{}, err
	}
	if id == old.id && old.value != "" {
		return old, nil
	}
	v, err := readBounded(path, MaxSecretBytes)
	if err != nil {
		return secretValue{}, err
	}
	if v == "" {
		return secretValue{}, errors.New("the file is empty")
	}
	for _, c := range v {
		if c == '\r' || c == '\n' || c == 0 {
			return secretValue{}, errors.New("the file holds a line break or a NUL: it cannot travel as a header or metadata")
		}
	}
	// The file may have changed between the stat and the read: its identity is taken
	// again, so that a change after it is seen next time.
	if id2, err := statID(path); err == nil {
		id = id2
	}
	return secretValue{id: id, value: v}, nil
}
