// The Backend: a set of simulated devices sharing one host.
//
// The backend owns what spans devices: the host's vector clock (the host
// is one participant of the happens-before relation, whatever goroutine
// calls), and the registry of streams by ID that HappensBefore uses.

package sim

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Config configures a Backend. Zero fields take the defaults.
type Config struct {
	// Devices is the number of devices (default 1). A negative value makes
	// a backend with no device, whose calls return gpu.ErrNoDevice.
	Devices int
	// Capacity is each device's memory in bytes (default 80 GiB, an
	// H100's). It is address space: bytes are committed in host memory
	// only when touched.
	Capacity uint64
	// DriverVersion is what DriverVersion reports (default 13000).
	DriverVersion int
	// Name is the devices' name (default "Simulated H100").
	Name string
	// HostCapacity bounds the page-locked host memory of MallocHost
	// (default 64 GiB).
	HostCapacity uint64
	// History is how many changes of what is ordered before a stream's
	// operations each stream remembers for HappensBefore (default
	// DefaultHistory; negative: all of them, memory growing with the run).
	// HappensBefore(a, b) is exact while b's stream has changed its
	// ordering fewer than History times since b was enqueued (and, where
	// only the host orders a before b, while the host has learned of a's
	// stream's progress fewer than History times since), and false
	// otherwise. Memory is then bounded for any length of run.
	History int
	// PeerAccess[a][b] says whether device a can access device b's memory
	// (cuDeviceCanAccessPeer), once granted (peer.go). Nil: every device
	// can access every other. Entries missing from a shorter matrix are
	// false; a device never counts as its own peer.
	PeerAccess [][]bool
	// IPCHandleTypes is the set of handle types a pool can be exported as
	// (ipc.go); default gpu.HandlePOSIX. Negative: none.
	IPCHandleTypes gpu.HandleType
	// NoIMEXChannel makes the devices answer as a card that offers fabric
	// handles (IPCHandleTypes with gpu.HandleFabric) to a process that
	// has no IMEX channel (/dev/nvidia-caps-imex-channels), as the H100
	// with driver 580 and the CUDA backend over it answer (fabric.go):
	// the attributes still say fabric, but creating a physical allocation
	// that requests fabric handles and creating a pool exportable as
	// fabric are gpu.ErrNotPermitted, with nothing made, and importing a
	// fabric handle is gpu.ErrNotSupported.
	NoIMEXChannel bool
}

// Defaults.
const (
	DefaultCapacity      = 80 << 30
	DefaultDriverVersion = 13000
	DefaultName          = "Simulated H100"
	DefaultHostCapacity  = 64 << 30
	DefaultHistory       = 256
)

// Backend is a simulated driver: it implements gpu.Backend. It is safe for
// concurrent use.
type Backend struct {
	cfg     Config
	devices []*Device
	stride  uint64 // each device's share of the address space

	// hostMu guards every stream's hostLog. hostGen is the host clock's
	// generation: it grows when the host learns of a completion it did
	// not know (hostJoin, vclock.go).
	hostMu  sync.Mutex
	hostGen atomic.Uint64
	// learned is the host's latest news, the last hostNews entries of
	// (generation, stream) that hostLearnLocked recorded, nlearned how
	// many it ever recorded; under hostMu. learnedSince answers from it.
	learned  [hostNews]learnedTick
	nlearned uint64
	streams  sync.Map // stream ID -> *stream, for HappensBefore and the host clock

	captureState // captures of all devices (capture.go)
}

// New returns a simulated backend.
func New(cfg Config) *Backend {
	if cfg.Devices == 0 {
		cfg.Devices = 1
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.DriverVersion == 0 {
		cfg.DriverVersion = DefaultDriverVersion
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.HostCapacity == 0 {
		cfg.HostCapacity = DefaultHostCapacity
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.IPCHandleTypes == 0 {
		cfg.IPCHandleTypes = gpu.HandlePOSIX
	} else if cfg.IPCHandleTypes < 0 {
		cfg.IPCHandleTypes = gpu.HandleNone
	}
	b := &Backend{cfg: cfg, stride: max(uint64(vaStride), roundUp(4*cfg.Capacity, vaStride))}
	b.active = make(map[*capture]struct{})
	for i := 0; i < cfg.Devices; i++ {
		b.devices = append(b.devices, newDevice(b, i))
	}
	return b
}

var _ gpu.Backend = (*Backend)(nil)

// Name returns "sim".
func (b *Backend) Name() string { return "sim" }

// Simulated returns true.
func (b *Backend) Simulated() bool { return true }

// DriverVersion returns Config.DriverVersion.
func (b *Backend) DriverVersion() (int, error) { return b.cfg.DriverVersion, nil }

// DeviceCount returns Config.Devices, or an error matching
// gpu.ErrNoDevice for a backend configured with none.
func (b *Backend) DeviceCount() (int, error) {
	if len(b.devices) == 0 {
		return 0, driverErr("cuDeviceGetCount", gpu.ErrNoDevice)
	}
	return len(b.devices), nil
}

// Device returns device ordinal; the same *Device every time.
func (b *Backend) Device(ordinal int) (gpu.Device, error) {
	if len(b.devices) == 0 {
		return nil, driverErr("cuDeviceGet", gpu.ErrNoDevice)
	}
	if ordinal < 0 || ordinal >= len(b.devices) {
		return nil, driverErrf("cuDeviceGet", gpu.ErrInvalidDevice, "ordinal %d of %d devices", ordinal, len(b.devices))
	}
	return b.devices[ordinal], nil
}

// hostJoin records that the host has observed the completion of o, and
// so of everything ordered before it: o, its explicit clock, and what the
// host knew when o was enqueued (known already). It visits only the runs
// of o's clock that the last operation it observed on o's stream did not
// have (runs are immutable and shared, so one seen is learned), so
// observing a stream again and again costs O(what its clock gained), not
// O(its clock) each time. o may be another backend's (the record of an
// interprocess event, ipc.go): then what the host learns is what o's
// clock says of b's own streams; the other process's streams are not in
// b's relation (HappensBefore answers false across backends).
func (b *Backend) hostJoin(o *op) {
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	g := b.hostGen.Load() + 1
	own := o.s.dev.b == b
	grew := false
	var seen clock
	if own {
		grew = o.s.hostLearnLocked(o.seq, g)
		seen = o.s.hostSeen
	}
	for _, r := range o.deps {
		if slices.ContainsFunc(seen, func(q vclock) bool { return len(q) == len(r) && &q[0] == &r[0] }) {
			continue
		}
		for _, t := range r {
			if st := b.stream(t.id); st != nil {
				grew = st.hostLearnLocked(t.seq, g) || grew
			}
		}
	}
	if own {
		o.s.hostSeen = o.deps
	}
	if grew {
		b.hostGen.Store(g) // after the streams' entries: see hostKnows
	}
}

// stream returns the stream of ID id, or nil.
func (b *Backend) stream(id uint64) *stream {
	if v, ok := b.streams.Load(id); ok {
		return v.(*stream)
	}
	return nil
}

// hostNews is how many of the host's latest lessons Backend.learned
// keeps.
const hostNews = 1024

// learnedTick says that at generation gen the host learned something new
// of stream s.
type learnedTick struct {
	gen uint64
	s   *stream
}

// learnedSince calls fn for each stream the host learned of at a
// generation after from and up to to (newest first, a stream perhaps more
// than once), and reports whether those were all: false when more than
// limit of them, or some already forgotten, would have been needed (fn
// may have been called for some).
func (b *Backend) learnedSince(from, to uint64, limit int, fn func(*stream)) bool {
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	n := 0
	for i := b.nlearned; i > 0 && i+hostNews > b.nlearned; i-- {
		t := &b.learned[(i-1)%hostNews]
		if t.gen <= from {
			return true
		}
		if t.gen > to {
			continue
		}
		if n++; n > limit {
			return false
		}
		fn(t.s)
	}
	return b.nlearned <= hostNews
}

// hostKnows reports whether, at host generation gen, the host knew
// operation seq of s complete. Answered from s's latest entry, it may say
// false for a generation older than that entry (callers then keep what
// they would have dropped); hostKnewAt answers exactly from the log.
func (b *Backend) hostKnows(s *stream, seq, gen uint64) bool {
	last := s.hostLast.Load()
	return last != nil && last.gen <= gen && last.seq >= seq
}

// hostKnewAt reports whether, at host generation gen, the host knew
// operation seq of s complete: exactly, unless s's log has dropped the
// entries that would say (then false).
func (b *Backend) hostKnewAt(s *stream, seq, gen uint64) bool {
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	i, _ := slices.BinarySearchFunc(s.hostLog, seq, func(t hostTick, seq uint64) int { return cmp.Compare(t.seq, seq) })
	return i < len(s.hostLog) && s.hostLog[i].gen <= gen
}
