package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/quorumlock/quorumlock/fence"
)

// TokenHeader carries the writer's fencing token.
const TokenHeader = "Fencing-Token"

// Store is a tiny file store that refuses stale writers: every PUT must
// carry the writer's fencing token, and a token lower than the highest one
// the file has seen is refused with 409 Conflict. It knows nothing about
// locks, masters or clocks: the token is all it checks.
//
//	PUT /files/{name}   body: the content; header Fencing-Token: n
//	GET /files/{name}   the content; header Fencing-Token: the writer's token
type Store struct {
	guard fence.Guard
	mu    sync.Mutex
	files map[string]file
}

type file struct {
	data  []byte
	token uint64
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{files: map[string]file{}} }

// Handler returns the store's HTTP handler.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /files/{name}", s.put)
	mux.HandleFunc("GET /files/{name}", s.get)
	return mux
}

func (s *Store) put(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	token, err := strconv.ParseUint(r.Header.Get(TokenHeader), 10, 64)
	if err != nil || token == 0 {
		http.Error(w, "missing or bad "+TokenHeader+" header: a positive integer is required", http.StatusBadRequest)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err = s.guard.Write(name, token, func() error {
		s.mu.Lock()
		s.files[name] = file{data: data, token: token}
		s.mu.Unlock()
		return nil
	})
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		http.Error(w, fmt.Sprintf("stale fencing token %d: the file was written with token %d", stale.Token, stale.Highest), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Store) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f, ok := s.files[r.PathValue("name")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set(TokenHeader, strconv.FormatUint(f.token, 10))
	_, _ = w.Write(f.data)
}
