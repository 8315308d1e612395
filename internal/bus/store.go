package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"kvlive/events"
)

// Files kvlive keeps in a store directory beside JetStream's own.
const (
	// storeMarker marks a directory as a kvlive store: kvlive writes into,
	// and empties, only directories that carry it (or were empty).
	storeMarker = ".kvlive-store"
	// storeLock is held (flock) by the one process serving the store, and
	// says who that is.
	storeLock = ".kvlive-store.lock"
	// jetStreamDir is the subdirectory the embedded server keeps its
	// streams in.
	jetStreamDir = "jetstream"
)

// ErrStoreInUse is returned when another process holds a store.
var ErrStoreInUse = errors.New("store in use")

// Store is a JetStream store directory this process owns and holds: a
// second process opening it gets ErrStoreInUse, and can read from Holder
// where the holder serves it.
type Store struct {
	Dir  string
	lock *os.File
}

// Holder is what a store's lock file says about the process serving it.
type Holder struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// URL is where the holder's NATS server listens, "" when it serves
	// only its own process.
	URL string `json:"url,omitempty"`
}

// OpenStore claims dir as this process's store: it creates dir when
// missing, refuses a non-empty directory kvlive does not own (no marker),
// and takes the store's exclusive lock, failing with ErrStoreInUse (and who
// holds it) when another process has it. Close releases it.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	if err := claim(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, storeLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, inUse(dir)
		}
		return nil, fmt.Errorf("store %s: lock: %w", dir, err)
	}
	return &Store{Dir: dir, lock: f}, nil
}

// claim makes dir a kvlive store, or refuses it.
func claim(dir string) error {
	marker := filepath.Join(dir, storeMarker)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store %s: %w", dir, err)
	}
	if !adoptable(dir, entries) {
		return fmt.Errorf("store %s: the directory is not empty and is not a kvlive store (no %s): "+
			"kvlive writes only into a new or empty directory, or one it made; pick another --data-dir", dir, storeMarker)
	}
	if err := os.WriteFile(marker, []byte("kvlive JetStream store: kvlive may empty its jetstream/ subdirectory\n"), 0o600); err != nil {
		return fmt.Errorf("store %s: %w", dir, err)
	}
	return nil
}

// adoptable reports whether a directory without the marker may become a
// store: it is empty, or holds only a jetstream/ store (an earlier kvlive's,
// from before the marker) and other kvlive stores (the demo's store lives
// inside kvlive run's default directory).
func adoptable(dir string, entries []os.DirEntry) bool {
	for _, e := range entries {
		switch {
		case e.IsDir() && e.Name() == jetStreamDir:
			if !onlyKvliveStreams(filepath.Join(dir, jetStreamDir)) {
				return false
			}
		case e.IsDir():
			if !isStore(filepath.Join(dir, e.Name())) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// isStore reports whether dir is a kvlive store: it has the marker, or
// holds only a jetstream/ store (an earlier kvlive's, such as an old demo
// store).
func isStore(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, storeMarker)); err == nil {
		return true
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() != jetStreamDir {
			return false
		}
	}
	return onlyKvliveStreams(filepath.Join(dir, jetStreamDir))
}

// onlyKvliveStreams reports whether a JetStream store directory holds
// kvlive's streams and buckets and nothing else, in every account
// (<account>/streams/<stream>, as nats-server lays a file store out): an
// unmarked store is adopted, and may be emptied, only if it is kvlive's.
func onlyKvliveStreams(js string) bool {
	accounts, err := os.ReadDir(js)
	if err != nil {
		return false
	}
	for _, a := range accounts {
		if !a.IsDir() {
			continue
		}
		streams, err := os.ReadDir(filepath.Join(js, a.Name(), "streams"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false
		}
		for _, st := range streams {
			if !strings.HasPrefix(st.Name(), events.StreamPrefix) && !strings.HasPrefix(st.Name(), "KV_"+events.BucketPrefix) {
				return false
			}
		}
	}
	return true
}

func inUse(dir string) error {
	h, ok := StoreHolder(dir)
	switch {
	case !ok:
		return fmt.Errorf("store %s: %w by another process", dir, ErrStoreInUse)
	case h.URL != "":
		return fmt.Errorf("store %s: %w by %s (pid %d), serving it at %s", dir, ErrStoreInUse, h.Command, h.PID, h.URL)
	}
	return fmt.Errorf("store %s: %w by %s (pid %d)", dir, ErrStoreInUse, h.Command, h.PID)
}

// Advertise records who serves the store (this process, command, and the
// URL its server listens on, if any), for the read commands.
func (s *Store) Advertise(command, url string) error {
	b, err := json.Marshal(Holder{PID: os.Getpid(), Command: command, URL: url})
	if err != nil {
		return err
	}
	if err := s.lock.Truncate(0); err != nil {
		return fmt.Errorf("store %s: %w", s.Dir, err)
	}
	if _, err := s.lock.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("store %s: %w", s.Dir, err)
	}
	return nil
}

// Empty removes the JetStream data from the store, leaving the directory,
// its marker and anything else in it alone.
func (s *Store) Empty() error {
	if err := os.RemoveAll(filepath.Join(s.Dir, jetStreamDir)); err != nil {
		return fmt.Errorf("store %s: %w", s.Dir, err)
	}
	return nil
}

// Close releases the store (the lock file stays, unlocked).
func (s *Store) Close() error {
	if s == nil || s.lock == nil {
		return nil
	}
	_ = s.lock.Truncate(0)
	return s.lock.Close()
}

// StoreHolder reads who holds dir's lock; ok is false when no process does.
func StoreHolder(dir string) (Holder, bool) {
	f, err := os.Open(filepath.Join(dir, storeLock))
	if err != nil {
		return Holder{}, false
	}
	defer func() { _ = f.Close() }()
	// Free if a shared lock can be had at once.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Holder{}, false
	}
	var h Holder
	b, err := io.ReadAll(f)
	if err != nil || json.Unmarshal(b, &h) != nil {
		return Holder{}, true
	}
	return h, true
}

// HasJetStream reports whether dir holds a JetStream store.
func HasJetStream(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, jetStreamDir))
	return err == nil
}
