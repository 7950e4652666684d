// The exporting side: a resource over an exportable driver pool, or over
// an mr.Virtual made with handle types (NewVirtualExporter), and one Link
// per importer through which its allocations are lent.
//
// Invariants, under Exporter.mu: live holds every allocation handed out
// and not yet freed, with its size; lent holds those lent and not given
// back (a subset of live); after holds, for an allocation given back, the
// stream its loan's return wait was enqueued on, until it is freed.
// Deallocate refuses what is in lent and orders a free on another stream
// after the stream in after; a failed Deallocate changes none of them.

package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// ExporterOptions configure an Exporter.
type ExporterOptions struct {
	// Handle is the handle type the pool is exported as, the caller's
	// choice (nothing picks one for it):
	//
	//   - gpu.HandlePOSIX, the default: a file descriptor, passed over
	//     the Unix socket (SCM_RIGHTS); importers on the same machine.
	//   - gpu.HandleFabric: 64 bytes in the hello, no descriptor, which
	//     the driver honours across the nodes of an NVLink fabric. The
	//     device must offer it (gpu.IPC.ExportHandleTypes), else
	//     NewExporter is gpu.ErrNotSupported; and each process must
	//     have an IMEX channel (/dev/nvidia-caps-imex-channels), which a
	//     device's attributes do not tell. In a process without one,
	//     NewExporter returns gpu.ErrNotPermitted and makes no pool: the
	//     backend refuses the pool (gpu.IPC.NewExportableMemPool), as on
	//     the H100 this project is tested on, whose driver would make it,
	//     refuse its export, and crash the process destroying it. An
	//     importer without one refuses the hello in Accept (the H100
	//     answers a fabric import there with gpu.ErrNotSupported).
	//
	// Any other value, two types included, is gpu.ErrInvalidValue.
	Handle gpu.HandleType
	// Async configures the driver pool below (its Exportable and pool
	// choices are the Exporter's).
	Async mr.AsyncOptions
}

// VirtualExporterOptions configure an Exporter of Virtual memory.
type VirtualExporterOptions struct {
	// Handle is the handle type a lent range's pieces are exported as,
	// one of the Virtual's VirtualOptions.HandleTypes (else
	// gpu.ErrInvalidValue): gpu.HandlePOSIX, the default, a descriptor
	// per piece over the socket; or gpu.HandleFabric, 64 bytes per piece
	// in the lend, which needs an IMEX channel in each process, as for
	// ExporterOptions.Handle. Without one the Virtual's allocations
	// already fail (mr.VirtualOptions.HandleTypes), and an importer
	// without one refuses the loan in Receive (gpu.ErrNotSupported, as
	// the H100 answers a fabric import there) and gives it back at once.
	Handle gpu.HandleType
	// Resource is what the Exporter allocates from and frees to: the
	// Virtual itself (nil), or a resource over it whose memory lies in
	// it, such as a Pool. Only memory Virtual.Export can export is
	// lendable: a plain allocation of the Virtual from its start, or
	// committed granules of a growable one (a Pool's blocks growing in
	// place); a Pool's small block inside one of its plain small chunks
	// (not at the chunk's start) is not: Lend returns Export's
	// mr.ErrUnknownPointer and lends nothing.
	Resource mr.Resource
}

// Exporter is a resource whose allocations can be lent to other
// processes. It is safe for concurrent use.
type Exporter struct {
	dev    gpu.Device
	x      gpu.IPC
	handle gpu.HandleType
	async  *mr.Async // the driver pool; nil over a Virtual
	virt   *mr.Virtual
	res    mr.Resource // what allocations come from: async, or over virt
	events gpu.EventCache

	mu     sync.Mutex
	live   map[gpu.DevicePtr]int
	lent   map[gpu.DevicePtr]*Loan
	after  map[gpu.DevicePtr]gpu.Stream
	links  map[*Link]struct{}
	closed bool
}

var _ mr.Resource = (*Exporter)(nil)

// NewExporter creates an exportable pool on dev and a resource over it.
func NewExporter(dev gpu.Device, opts ExporterOptions) (*Exporter, error) {
	x, err := gpu.IPCOf(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: exporter: %w", err)
	}
	if opts.Handle == gpu.HandleNone {
		opts.Handle = gpu.HandlePOSIX
	}
	if opts.Handle != gpu.HandlePOSIX && opts.Handle != gpu.HandleFabric {
		return nil, fmt.Errorf("ipc: exporter: handle type %#x: %w", int32(opts.Handle), gpu.ErrInvalidValue)
	}
	ao := opts.Async
	ao.Exportable, ao.OwnPool, ao.Pool, ao.CurrentPool = opts.Handle, false, nil, false
	a, err := mr.NewAsync(dev, ao)
	if err != nil {
		return nil, fmt.Errorf("ipc: exporter: %w", err)
	}
	return newExporter(dev, x, opts.Handle, a, nil, a), nil
}

func newExporter(dev gpu.Device, x gpu.IPC, t gpu.HandleType, a *mr.Async, v *mr.Virtual, r mr.Resource) *Exporter {
	return &Exporter{
		dev: dev, x: x, handle: t, async: a, virt: v, res: r, events: gpu.EventCache{Device: dev},
		live: make(map[gpu.DevicePtr]int), lent: make(map[gpu.DevicePtr]*Loan),
		after: make(map[gpu.DevicePtr]gpu.Stream), links: make(map[*Link]struct{}),
	}
}

// NewVirtualExporter creates an Exporter whose allocations come from v
// (or opts.Resource over v) and are lent as the physical allocations
// under them (Virtual.Export): an importer maps each lent range in an
// address range of its own. v must be made with opts.Handle among its
// VirtualOptions.HandleTypes (else gpu.ErrInvalidValue); its device must
// have interprocess events (else gpu.ErrNotSupported). v and
// opts.Resource stay the caller's: Close closes neither.
func NewVirtualExporter(v *mr.Virtual, opts VirtualExporterOptions) (*Exporter, error) {
	if v == nil {
		return nil, fmt.Errorf("ipc: virtual exporter: nil Virtual: %w", gpu.ErrInvalidValue)
	}
	if opts.Handle == gpu.HandleNone {
		opts.Handle = gpu.HandlePOSIX
	}
	if ht := v.Options().HandleTypes; (opts.Handle != gpu.HandlePOSIX && opts.Handle != gpu.HandleFabric) || ht&opts.Handle == 0 {
		return nil, fmt.Errorf("ipc: virtual exporter: handle type %#x, the Virtual's memory is exportable as %#x: %w",
			int32(opts.Handle), int32(ht), gpu.ErrInvalidValue)
	}
	dev := v.Device()
	x, err := gpu.IPCOf(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: virtual exporter: %w", err)
	}
	r := opts.Resource
	if r == nil {
		r = v
	}
	return newExporter(dev, x, opts.Handle, nil, v, r), nil
}

// Device is the exporter's device.
func (e *Exporter) Device() gpu.Device { return e.dev }

// Async is the driver-pool resource below, for its statistics and
// attributes (reserved bytes, Trim); nil for an Exporter of Virtual
// memory.
func (e *Exporter) Async() *mr.Async { return e.async }

// Upstream is the resource below (the Async, or the Virtual or
// VirtualExporterOptions.Resource), so that mr.Chain, mr.Reclaim and
// mr.GrantPeer reach it.
func (e *Exporter) Upstream() mr.Resource { return e.res }

// Allocate allocates from the exportable pool (or the resource over the
// Virtual).
func (e *Exporter) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("ipc: allocate: %w", ErrClosed)
	}
	p, err := e.res.Allocate(size, s)
	if err != nil || p == 0 {
		return p, err
	}
	e.mu.Lock()
	e.live[p] = size
	e.mu.Unlock()
	return p, nil
}

// Deallocate frees p on s unless it is lent: a lent allocation is
// refused (ErrLent) and stays lent and live, rather than freed later, so
// that the caller always knows whether the memory went; the loan's Wait
// or Done says when it is back. A loan given back on another stream than
// s is ordered before the free.
func (e *Exporter) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if p == 0 {
		return e.res.Deallocate(p, size, s)
	}
	e.mu.Lock()
	if _, ok := e.lent[p]; ok {
		e.mu.Unlock()
		return fmt.Errorf("ipc: free %#x: %w", uint64(p), ErrLent)
	}
	after := e.after[p]
	e.mu.Unlock()
	if after != nil && s != nil && after != s && after.ID() != s.ID() {
		if err := e.order(s, after); err != nil {
			return fmt.Errorf("ipc: free %#x: order after the returned loan: %w", uint64(p), err)
		}
	}
	if err := e.res.Deallocate(p, size, s); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.live, p)
	delete(e.after, p)
	e.mu.Unlock()
	return nil
}

// order makes later work on s wait for the work enqueued on first so far.
func (e *Exporter) order(s, first gpu.Stream) error {
	ev, err := e.events.Get()
	if err != nil {
		return err
	}
	defer e.events.Put(ev)
	if err := ev.Record(first); err != nil {
		return err
	}
	return s.WaitEvent(ev)
}

// Close closes every link and the pool; it refuses (ErrLent) while a loan
// is out, since the pool's memory would go while an importer uses it.
// Allocations still live are freed with the pool, after their streams'
// work. An Exporter of Virtual memory leaves the Virtual (and the
// resource over it) open: its live allocations stay the caller's to free,
// through the Exporter's Deallocate or the resource's.
func (e *Exporter) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	if n := len(e.lent); n > 0 {
		e.mu.Unlock()
		return fmt.Errorf("ipc: close: %d allocations: %w", n, ErrLent)
	}
	e.closed = true
	links := make([]*Link, 0, len(e.links))
	for l := range e.links {
		links = append(links, l)
	}
	e.mu.Unlock()
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	if e.async != nil {
		errs = append(errs, e.async.Close())
	}
	errs = append(errs, e.events.Close())
	return errors.Join(errs...)
}

// Link is the exporter's side of one connection to an importer.
type Link struct {
	e          *Exporter
	conn       *net.UnixConn
	peerPID    int // the importer's process, where the system says (0: unknown)
	lendStream gpu.Stream
	lendEvent  gpu.Event // interprocess, recorded only on lendStream
	retEvent   gpu.Event // the importer's return event, imported

	wmu writeLock // frames out, and the lend event's record with its frame

	mu      sync.Mutex
	next    uint64
	loans   map[uint64]*Loan
	lost    error // why the link ended, once it has
	done    chan struct{}
	closed  bool // Close was called
	closing bool // this side said goodbye first
}

// testHookCommit, set by tests only, runs when Serve's or Accept's
// handshake is done (side "serve" or "accept"), before it commits.
var testHookCommit func(side string)

// Serve sends the pool to the importer at the other end of conn and
// returns the link its loans go through. The link reads the importer's
// give-backs until the connection ends; ctx bounds the handshake (its end
// closes conn). The link owns conn and closes it; if Serve fails, conn
// stays the caller's to close, and nothing else of the handshake is kept.
func (e *Exporter) Serve(ctx context.Context, conn *net.UnixConn) (_ *Link, err error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("ipc: serve: %w", ErrClosed)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer func() {
		stop()
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
	}()
	// l, not the result: the undo functions below run after a return
	// has set the result to nil.
	l := &Link{e: e, conn: conn, peerPID: peerPID(conn), loans: make(map[uint64]*Loan), done: make(chan struct{}), wmu: newWriteLock()}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if l.lendStream, err = e.dev.NewStream(); err != nil {
		return nil, fmt.Errorf("ipc: serve: %w", err)
	}
	undo = append(undo, func() { l.lendStream.Destroy() })
	if l.lendEvent, err = e.x.NewIPCEvent(); err != nil {
		return nil, fmt.Errorf("ipc: serve: %w", err)
	}
	undo = append(undo, func() { l.lendEvent.Destroy() })
	hello := frame{kind: kindHello, handle: int32(e.handle)}
	h, err := e.x.ExportEvent(l.lendEvent)
	if err != nil {
		return nil, fmt.Errorf("ipc: serve: %w", err)
	}
	hello.b = h
	if e.virt != nil {
		// No pool: each lend carries its pieces.
		hello.handle = int32(gpu.HandleNone)
		_, err = conn.Write(hello.marshal())
	} else {
		sh, xerr := e.x.ExportMemPool(e.async.Pool(), e.handle)
		if xerr != nil {
			return nil, fmt.Errorf("ipc: serve: %w", xerr)
		}
		if e.handle == gpu.HandleFabric {
			hello.a = sh.Fabric
			_, err = conn.Write(hello.marshal())
		} else {
			err = SendFile(conn, hello.marshal(), sh.File)
			sh.File.Close() // the importer has its own descriptor now
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: serve: hello: %w", lostIfEOF(err))
	}
	back, err := readFrame(conn, kindHelloBack)
	if err == nil && back.kind != kindHelloBack {
		err = fmt.Errorf("ipc: a bye for a hello: %w", ErrProtocol)
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: serve: %w", err)
	}
	if l.retEvent, err = e.x.ImportEvent(back.b); err != nil {
		return nil, fmt.Errorf("ipc: serve: the importer's event: %w", err)
	}
	undo = append(undo, func() { l.retEvent.Destroy() })
	if testHookCommit != nil {
		testHookCommit("serve")
	}
	// Commit only if ctx has not closed conn: once the link is registered
	// and read runs, its stream and events are the link's to release.
	if !stop() {
		return nil, fmt.Errorf("ipc: serve: %w", ctx.Err())
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("ipc: serve: %w", ErrClosed)
	}
	e.links[l] = struct{}{}
	e.mu.Unlock()
	go l.read()
	return l, nil
}

// Loan is one allocation lent through a Link.
type Loan struct {
	l        *Link
	id       uint64
	p        gpu.DevicePtr
	size     int
	s        gpu.Stream
	onReturn func() error // LendBuffer's: the buffer's next users wait on s
	done     chan struct{}
	err      error // set before done closes: nil, or why it came back without the importer's word
}

// Ptr is the lent allocation's address in the exporter.
func (ln *Loan) Ptr() gpu.DevicePtr { return ln.p }

// Size is the lent allocation's length in bytes.
func (ln *Loan) Size() int { return ln.size }

// Done is closed when the loan is back: given back by the importer (the
// loan's stream then waits for the importer's work), or its importer
// lost.
func (ln *Loan) Done() <-chan struct{} { return ln.done }

// Wait blocks until the loan is back or ctx ends. It returns nil when the
// importer gave it back, an error matching ErrPeerLost when the importer
// was lost (the memory is the exporter's again all the same), or ctx's
// error (the loan is still out).
func (ln *Loan) Wait(ctx context.Context) error {
	select {
	case <-ln.done:
	case <-ctx.Done():
		return fmt.Errorf("ipc: loan %d: %w", ln.id, ctx.Err())
	}
	if ln.err != nil {
		return ln.err
	}
	if ln.onReturn != nil {
		return ln.onReturn()
	}
	return nil
}

// Lend lends p, an allocation of the exporter of size bytes, to the
// importer: it sees everything enqueued on s before the call. When it
// comes back, later work on s waits for the importer's last use. Until
// then the exporter must not use it, and cannot free it (ErrLent).
//
// Lend blocks while the connection cannot take the lend frame (an
// importer that stops calling Receive fills its queue and then the
// socket) until ctx ends; it then returns ctx's error
// (context.DeadlineExceeded, context.Canceled) and nothing is lent. If
// ctx ended the frame part-way, the link has ended too (Err matches
// ErrPeerLost): the importer can no longer read frames from it.
func (l *Link) Lend(ctx context.Context, p gpu.DevicePtr, size int, s gpu.Stream) (*Loan, error) {
	return l.lend(ctx, p, size, s, nil)
}

func (l *Link) lend(ctx context.Context, p gpu.DevicePtr, size int, s gpu.Stream, onReturn func() error) (*Loan, error) {
	e := l.e
	if s == nil {
		return nil, fmt.Errorf("ipc: lend: nil stream: %w", gpu.ErrInvalidHandle)
	}
	e.mu.Lock()
	n, ok := e.live[p]
	_, out := e.lent[p]
	switch {
	case !ok || p == 0:
		e.mu.Unlock()
		return nil, fmt.Errorf("ipc: lend %#x: %w", uint64(p), ErrNotLendable)
	case n != size:
		e.mu.Unlock()
		return nil, fmt.Errorf("ipc: lend %#x: size %d, allocated %d: %w", uint64(p), size, n, mr.ErrSizeMismatch)
	case out:
		e.mu.Unlock()
		return nil, fmt.Errorf("ipc: lend %#x: %w", uint64(p), ErrLent)
	}
	l.mu.Lock()
	if l.lost != nil || l.closed {
		err := l.lost
		if err == nil {
			err = ErrClosed
		}
		l.mu.Unlock()
		e.mu.Unlock()
		return nil, fmt.Errorf("ipc: lend: %w", err)
	}
	l.next++
	ln := &Loan{l: l, id: l.next, p: p, size: size, s: s, onReturn: onReturn, done: make(chan struct{})}
	l.loans[ln.id] = ln
	e.lent[p] = ln
	l.mu.Unlock()
	e.mu.Unlock()

	if err := l.send(ctx, ln); err != nil {
		// Nothing reached the importer: the loan never was.
		l.mu.Lock()
		delete(l.loans, ln.id)
		l.mu.Unlock()
		e.mu.Lock()
		delete(e.lent, p)
		e.mu.Unlock()
		return nil, err
	}
	return ln, nil
}

// send orders the lend event after s and sends the lend frame (with the
// export of a Virtual range after it) until ctx ends. A frame cut short
// ends the link.
func (l *Link) send(ctx context.Context, ln *Loan) error {
	var msgs []message
	if v := l.e.virt; v != nil {
		x, err := v.Export(ln.p, ln.size, l.e.handle)
		if err != nil {
			return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
		}
		// The socket passes the importer descriptors of its own.
		defer x.Close()
		if msgs, err = virtualMessages(x); err != nil {
			return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
		}
		f := frame{kind: kindLendVirtual, id: ln.id, size: uint64(ln.size)}
		msgs = append([]message{{b: f.marshal()}}, msgs...)
	} else {
		data, err := l.e.x.ExportPointer(ln.p)
		if err != nil {
			return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
		}
		f := frame{kind: kindLend, id: ln.id, size: uint64(ln.size), a: data}
		msgs = []message{{b: f.marshal()}}
	}
	if err := l.wmu.lock(ctx); err != nil {
		return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
	}
	defer l.wmu.unlock()
	if err := l.e.order(l.lendStream, ln.s); err != nil {
		return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
	}
	if err := l.lendEvent.Record(l.lendStream); err != nil {
		return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
	}
	if err := writeMsgsLocked(ctx, l.conn, msgs); err != nil {
		if errors.Is(err, errFrameCut) {
			l.mu.Lock()
			if l.lost == nil {
				l.lost = fmt.Errorf("ipc: lend %#x: %w: %w", uint64(ln.p), ErrPeerLost, err)
			}
			l.mu.Unlock()
		}
		return fmt.Errorf("ipc: lend %#x: %w", uint64(ln.p), err)
	}
	return nil
}

// LendBuffer lends b, a buffer of the exporter, with its block-use state:
// the importer sees b after its last write and every read since, and
// when the loan comes back (Wait) b's next users wait on the importer's
// last use. b must not be used until then. ctx bounds the wait for the
// connection as in Lend.
func (l *Link) LendBuffer(ctx context.Context, b *buf.Buffer) (*Loan, error) {
	if b == nil || b.Resource() != mr.Resource(l.e) {
		return nil, fmt.Errorf("ipc: lend buffer: not a buffer of this exporter: %w", ErrNotLendable)
	}
	s := b.Stream()
	if err := b.Prepare(s, buf.ReadWrite); err != nil {
		return nil, fmt.Errorf("ipc: lend buffer: %w", err)
	}
	back := func() error {
		// The loan's stream waits on the importer already; a use there
		// makes the buffer's next users on any stream wait on it.
		if err := b.Finish(s, buf.ReadWrite); err != nil {
			return fmt.Errorf("ipc: buffer back: %w", err)
		}
		return nil
	}
	ln, err := l.lend(ctx, b.Ptr(), b.Size(), s, back)
	if err != nil {
		if ferr := b.Finish(s, buf.ReadWrite); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, err
	}
	return ln, nil
}

// read takes the importer's give-backs until the connection ends or the
// importer says goodbye.
func (l *Link) read() {
	for {
		f, err := readFrame(l.conn, kindGiveBack)
		if err != nil {
			l.lose(err)
			return
		}
		if f.kind == kindBye {
			l.bye()
			return
		}
		l.mu.Lock()
		ln := l.loans[f.id]
		delete(l.loans, f.id)
		l.mu.Unlock()
		if ln == nil {
			l.lose(fmt.Errorf("ipc: give-back of loan %d, which is not out: %w", f.id, ErrProtocol))
			return
		}
		ln.err = nil
		if err := ln.s.WaitEvent(l.retEvent); err != nil {
			// The importer's work cannot be waited for on the stream:
			// wait for it on the host before the memory is ours again.
			if serr := l.retEvent.Synchronize(); serr != nil {
				ln.err = fmt.Errorf("ipc: loan %d back: %w", ln.id, errors.Join(err, serr))
			}
		}
		l.back(ln)
	}
}

// back makes ln's allocation the exporter's again and wakes its waiters.
func (l *Link) back(ln *Loan) {
	e := l.e
	e.mu.Lock()
	if e.lent[ln.p] == ln {
		delete(e.lent, ln.p)
		e.after[ln.p] = ln.s
	}
	e.mu.Unlock()
	close(ln.done)
}

// bye ends the link on the importer's goodbye. Every give-back came
// before it; loans still out were never imported (the importer imports
// nothing after its bye) and come back unused. The waits on the importer's
// return event are executed (the device synchronized) before the answering
// bye, after which the importer destroys that event: an event must outlive
// every wait on it. If this side said goodbye first, the bye is the answer.
func (l *Link) bye() {
	l.mu.Lock()
	answered := l.closing
	loans := make([]*Loan, 0, len(l.loans))
	for id, ln := range l.loans {
		loans = append(loans, ln)
		delete(l.loans, id)
	}
	if l.lost == nil {
		l.lost = fmt.Errorf("ipc: the link was closed: %w", ErrClosed)
	}
	l.mu.Unlock()
	for _, ln := range loans {
		l.back(ln)
	}
	if !answered {
		err := l.e.dev.Synchronize()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), byeWait)
			err = l.write(ctx, frame{kind: kindBye})
			cancel()
		}
		if err != nil {
			// No answer: the connection's end tells the importer not to
			// wait for one.
			l.conn.Close()
			l.mu.Lock()
			l.lost = fmt.Errorf("ipc: the importer's goodbye: %w", err)
			l.mu.Unlock()
		}
	}
	close(l.done)
}

// write sends one frame until ctx ends.
func (l *Link) write(ctx context.Context, f frame) error {
	return writeFrame(ctx, l.wmu, l.conn, f)
}

// lose ends the link on a lost connection: every loan still out comes
// back with ErrPeerLost, once the importer's process has finished exiting
// where it is known.
func (l *Link) lose(why error) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = why
		if !errors.Is(why, ErrPeerLost) {
			l.lost = fmt.Errorf("%w: %w", ErrPeerLost, why)
		}
	}
	loans := make([]*Loan, 0, len(l.loans))
	for id, ln := range l.loans {
		loans = append(loans, ln)
		delete(l.loans, id)
	}
	l.mu.Unlock()
	if len(loans) > 0 && l.peerPID > 0 {
		waitExited(l.peerPID)
	}
	for _, ln := range loans {
		ln.err = fmt.Errorf("ipc: loan %d: %w", ln.id, ErrPeerLost)
		l.back(ln)
	}
	close(l.done)
}

// Done is closed once the link has ended (goodbye, or connection lost)
// and every loan still out came back.
func (l *Link) Done() <-chan struct{} { return l.done }

// Err is why the link ended (an error matching ErrClosed after a
// goodbye, ErrPeerLost after a loss), nil while it runs.
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Outstanding is the number of loans not yet back.
func (l *Link) Outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.loans)
}

// byeWait bounds how long either side's Close waits to send its goodbye
// (a peer that stops reading leaves the socket full) and, again, for the
// answer.
const byeWait = 10 * time.Second

// Close says goodbye to the importer, waits for its answer (its waits on
// the lend event are then executed), and releases the link's stream and
// events. It refuses (ErrLent) while loans are out on a link that still
// runs: the importer maps them, and only its give-back or its exit makes
// them the exporter's again.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.lost == nil && len(l.loans) > 0 {
		n := len(l.loans)
		l.mu.Unlock()
		return fmt.Errorf("ipc: close link: %d loans: %w", n, ErrLent)
	}
	l.closed = true
	running := l.lost == nil
	l.closing = true
	l.mu.Unlock()
	var errs []error
	if running {
		ctx, cancel := context.WithTimeout(context.Background(), byeWait)
		err := l.write(ctx, frame{kind: kindBye})
		cancel()
		switch {
		case err == nil:
			select {
			case <-l.done:
			case <-time.After(byeWait):
				errs = append(errs, fmt.Errorf("ipc: close link: no answer to the goodbye in %v", byeWait))
			}
		case !errors.Is(err, ErrPeerLost):
			errs = append(errs, fmt.Errorf("ipc: close link: goodbye: %w", err))
		}
	}
	errs = append(errs, l.conn.Close())
	<-l.done
	l.e.mu.Lock()
	delete(l.e.links, l)
	l.e.mu.Unlock()
	// The connection is closed: a writer still inside returns now.
	l.wmu.lock(context.Background())
	defer l.wmu.unlock()
	errs = append(errs, l.lendStream.Synchronize(), l.lendStream.Destroy(), l.retEvent.Destroy(), l.lendEvent.Destroy())
	return errors.Join(errs...)
}
