// The importing side: the exporter's pool imported once per connection,
// each loan imported as it is received, and given back in stream order.
//
// A loan of Virtual memory (an Exporter made by NewVirtualExporter; no
// pool then) arrives as the pieces under the range and is mapped with
// ImportVirtual. Its unmap is not stream-ordered (cuMemUnmap acts at
// once): Release records an event after the importer's work on the
// release stream, gives the loan back at once (the exporter's wait on the
// return event orders its next use after that work), and keeps the
// mapping until the event has completed. Reap, which Receive and Release
// also run, then unmaps it, with an event query, never a host
// synchronization; Close waits for what is left.
//
// Invariants: imports holds every import received and not yet released,
// under Importer.mu; a release unmaps a pool import (FreeAsync on its
// stream) before its give-back frame is sent, and the return event is
// recorded on the return stream after that free, so the exporter's wait
// on it orders its free after the importer's. unmaps, under rmu, holds
// every released Virtual import not yet unmapped, with the event recorded
// after its last use; an entry leaves only once that event has completed
// and the range is unmapped. A lend frame that cannot be imported is
// given back at once, so the exporter's memory is never stranded by an
// importer's failure, and every descriptor that came with a lend is
// closed once the lend is imported, refused or dropped.

package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Importer receives an exporter's loans over one connection. It is safe
// for concurrent use.
type Importer struct {
	dev       gpu.Device
	x         gpu.IPC
	conn      *net.UnixConn
	pool      gpu.MemPool // imported; nil from an exporter of Virtual memory
	lendEvent gpu.Event   // the exporter's, imported
	retStream gpu.Stream
	retEvent  gpu.Event // interprocess, recorded only on retStream
	events    gpu.EventCache
	frames    chan lendMsg
	readErr   error // why frames closed; written before close(frames)

	wmu writeLock // give-backs: the return event's record with its frame

	mu        sync.Mutex
	imports   map[uint64]*Import
	closed    bool           // Close was called: Receive refuses
	closing   chan struct{}  // closed by Close: a waiting Receive gives up
	receiving sync.WaitGroup // Receives under way, which Close waits for
	saidBye   bool           // this side said goodbye: lends are dropped

	rmu    sync.Mutex
	unmaps []pendingUnmap // released Virtual imports, until their work is done
}

// lendMsg is a lend frame as read, with the export that followed a
// lendVirtual frame (its descriptors open, the receiver's to close).
type lendMsg struct {
	f frame
	x mr.VirtualExport
}

// close closes the descriptors that came with m.
func (m lendMsg) close() { m.x.Close() }

// pendingUnmap is a released Virtual import and the event recorded after
// its last use.
type pendingUnmap struct {
	ev gpu.Event
	m  *VirtualImport
}

// Accept takes the exporter's hello on conn and imports its pool on dev;
// ctx bounds the handshake (its end closes conn). The importer owns conn
// and closes it; if Accept fails, conn stays the caller's to close, and
// nothing else of the handshake is kept.
func Accept(ctx context.Context, dev gpu.Device, conn *net.UnixConn) (_ *Importer, err error) {
	x, err := gpu.IPCOf(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer func() {
		stop()
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
	}()
	// im, not the result: the undo functions below run after a return
	// has set the result to nil.
	im := &Importer{dev: dev, x: x, conn: conn, events: gpu.EventCache{Device: dev},
		frames: make(chan lendMsg, 64), imports: make(map[uint64]*Import), closing: make(chan struct{}), wmu: newWriteLock()}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	f, file, err := recvHello(conn)
	if err != nil {
		return nil, err
	}
	if ht := gpu.HandleType(f.handle); ht != gpu.HandleNone {
		sh := gpu.Shareable{Type: ht, Fabric: f.a, File: file}
		im.pool, err = x.ImportMemPool(sh)
		if file != nil {
			file.Close() // imported, or refused: either way no longer needed
		}
		if err != nil {
			return nil, fmt.Errorf("ipc: accept: the pool: %w", err)
		}
		undo = append(undo, func() { im.pool.Destroy() })
	}
	if im.lendEvent, err = x.ImportEvent(f.b); err != nil {
		return nil, fmt.Errorf("ipc: accept: the exporter's event: %w", err)
	}
	undo = append(undo, func() { im.lendEvent.Destroy() })
	if im.retStream, err = dev.NewStream(); err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", err)
	}
	undo = append(undo, func() { im.retStream.Destroy() })
	if im.retEvent, err = x.NewIPCEvent(); err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", err)
	}
	undo = append(undo, func() { im.retEvent.Destroy() })
	h, err := x.ExportEvent(im.retEvent)
	if err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", err)
	}
	back := frame{kind: kindHelloBack, b: h}
	if _, err := conn.Write(back.marshal()); err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", lostIfEOF(err))
	}
	if testHookCommit != nil {
		testHookCommit("accept")
	}
	// Commit only if ctx has not closed conn: once read runs, the
	// importer's pool, stream and events are Close's to release.
	if !stop() {
		return nil, fmt.Errorf("ipc: accept: %w", ctx.Err())
	}
	go im.read()
	return im, nil
}

// recvHello reads the hello frame and, for a POSIX handle, its
// descriptor. A hello of handle type HandleNone (an exporter of Virtual
// memory) has no pool and no descriptor.
func recvHello(conn *net.UnixConn) (frame, *os.File, error) {
	b := make([]byte, frameSize)
	file, err := recv(conn, b, true)
	if err != nil {
		return frame{}, nil, fmt.Errorf("ipc: accept: %w", err)
	}
	f, err := parseFrame(b)
	if err == nil && f.kind != kindHello {
		err = fmt.Errorf("ipc: frame kind %d, want hello: %w", f.kind, ErrProtocol)
	}
	// parseFrame refused any other handle type and a fabric handle in a
	// hello of another type.
	if ht := gpu.HandleType(f.handle); err == nil && (file != nil) != (ht == gpu.HandlePOSIX) {
		err = fmt.Errorf("ipc: a hello for handle type %#x with descriptor %v: %w", f.handle, file != nil, ErrProtocol)
	}
	if err != nil {
		if file != nil {
			file.Close()
		}
		return frame{}, nil, fmt.Errorf("ipc: accept: %w", err)
	}
	return f, file, nil
}

// read passes lend frames to Receive until the connection ends or a
// goodbye. On the exporter's goodbye it answers once its waits on the
// lend event have executed (the device synchronized), after which the
// exporter destroys that event; on the answer to its own it just stops.
// Lends after this side's goodbye are dropped (their descriptors closed):
// the exporter takes them back unused at the goodbye. A malformed export
// after a lendVirtual frame ends the link (ErrProtocol), every descriptor
// that came with it closed.
func (im *Importer) read() {
	for {
		f, err := readFrame(im.conn, 0)
		if err != nil {
			im.finish(err)
			return
		}
		m := lendMsg{f: f}
		switch f.kind {
		case kindLend, kindBye:
		case kindLendVirtual:
			x, err := readVirtual(im.conn)
			if err == nil && x.Size != f.size {
				err = errors.Join(fmt.Errorf("an export of %d bytes for a lend of %d: %w", x.Size, f.size, ErrProtocol), x.Close())
			}
			if err != nil {
				im.finish(fmt.Errorf("ipc: virtual lend %d: %w", f.id, err))
				return
			}
			m.x = x
		default:
			im.finish(fmt.Errorf("ipc: frame kind %d, want a lend: %w", f.kind, ErrProtocol))
			return
		}
		if f.kind == kindBye {
			im.mu.Lock()
			answered := im.saidBye
			im.mu.Unlock()
			err := fmt.Errorf("ipc: the exporter closed the link: %w", ErrPeerLost)
			if !answered {
				if serr := im.dev.Synchronize(); serr != nil {
					err = errors.Join(err, serr)
					im.conn.Close() // no answer: the end of the connection says so
				} else if werr := im.sayBye(); werr != nil {
					err = errors.Join(err, werr)
				}
			}
			im.finish(err)
			return
		}
		im.mu.Lock()
		drop := im.saidBye
		im.mu.Unlock()
		if drop {
			m.close()
		} else {
			im.frames <- m
		}
	}
}

// finish ends the frames with why.
func (im *Importer) finish(why error) {
	im.readErr = why
	close(im.frames)
}

// write sends one frame.
func (im *Importer) write(ctx context.Context, f frame) error {
	return writeFrame(ctx, im.wmu, im.conn, f)
}

// sayBye sends a goodbye or answers one, waiting at most byeWait for the
// socket to take it.
func (im *Importer) sayBye() error {
	ctx, cancel := context.WithTimeout(context.Background(), byeWait)
	defer cancel()
	return im.write(ctx, frame{kind: kindBye})
}

// Import is one loan, mapped in this process.
type Import struct {
	im   *Importer
	id   uint64
	p    gpu.DevicePtr
	size int
	virt *VirtualImport // a loan of Virtual memory; nil: of the pool
	done bool           // under im.mu
}

// Ptr is the import's address in this process, valid until Release.
func (i *Import) Ptr() gpu.DevicePtr { return i.p }

// Size is the import's length in bytes, the exporter's allocation's.
func (i *Import) Size() int { return i.size }

// Receive waits for the next loan and imports it; work enqueued on s
// after Receive returns sees the exporter's writes. It returns an error
// matching ErrPeerLost once the exporter is gone and no loan is left, and
// one matching ErrClosed once Close has begun (Close waits for a Receive
// under way, and releases what it imported).
func (im *Importer) Receive(ctx context.Context, s gpu.Stream) (*Import, error) {
	if s == nil {
		return nil, fmt.Errorf("ipc: receive: nil stream: %w", gpu.ErrInvalidHandle)
	}
	// Close waits for a Receive under way, so that an import it makes is
	// among those Close releases.
	im.mu.Lock()
	if im.closed {
		im.mu.Unlock()
		return nil, fmt.Errorf("ipc: receive: %w", ErrClosed)
	}
	im.receiving.Add(1)
	im.mu.Unlock()
	defer im.receiving.Done()
	// Unmap what earlier releases left once their work is done; an error
	// keeps those mappings for later and is not this Receive's failure.
	_ = im.Reap()
	var m lendMsg
	select {
	case fr, ok := <-im.frames:
		if !ok {
			return nil, fmt.Errorf("ipc: receive: %w", im.readErr)
		}
		m = fr
	case <-ctx.Done():
		return nil, fmt.Errorf("ipc: receive: %w", ctx.Err())
	case <-im.closing:
		return nil, fmt.Errorf("ipc: receive: %w", ErrClosed)
	}
	f := m.f
	var p gpu.DevicePtr
	var vm *VirtualImport
	var err error
	switch {
	case f.kind == kindLendVirtual:
		vm, err = ImportVirtual(im.dev, m.x)
		// Mapped, or refused: the descriptors are no longer needed, and
		// a failed close leaves nothing of the loan held here.
		m.x.Close()
		if err == nil {
			p = vm.Ptr()
			if werr := s.WaitEvent(im.lendEvent); werr != nil {
				// Nothing was enqueued on the mapping: unmap it now.
				err = errors.Join(werr, vm.Close())
			}
		}
	case im.pool == nil:
		err = fmt.Errorf("a lend of pool memory from an exporter without a pool: %w", ErrProtocol)
	default:
		p, err = im.x.ImportPointer(im.pool, gpu.PtrExportData(f.a))
		if err == nil {
			if werr := s.WaitEvent(im.lendEvent); werr != nil {
				err = errors.Join(werr, im.dev.FreeAsync(p, s))
			}
		}
	}
	if err != nil {
		// Give the loan back at once; nothing of it was used here.
		if gerr := im.giveBack(f.id, s); gerr != nil {
			err = errors.Join(err, gerr)
		}
		return nil, fmt.Errorf("ipc: receive loan %d: %w", f.id, err)
	}
	i := &Import{im: im, id: f.id, p: p, size: int(f.size), virt: vm}
	im.mu.Lock()
	im.imports[f.id] = i
	im.mu.Unlock()
	return i, nil
}

// Release unmaps the import after the work enqueued on s so far and gives
// the loan back: the exporter's next work on the allocation waits for it.
// A second Release is ErrReleased. If the exporter is gone the import is
// unmapped all the same and the error matches ErrPeerLost.
//
// An import of Virtual memory is unmapped once that work has completed
// (an event recorded on s, which Reap queries; see the file comment):
// Release does not wait for it, and Unmapping counts it until then.
func (i *Import) Release(s gpu.Stream) error {
	im := i.im
	// Claimed before the free, so that of two Releases racing (a caller's
	// and Close's) one frees and the other is ErrReleased; a failed free
	// gives the claim back.
	im.mu.Lock()
	if i.done {
		im.mu.Unlock()
		return fmt.Errorf("ipc: release loan %d: %w", i.id, ErrReleased)
	}
	i.done = true
	im.mu.Unlock()
	unclaim := func(err error) error {
		im.mu.Lock()
		i.done = false
		im.mu.Unlock()
		return fmt.Errorf("ipc: release loan %d: %w", i.id, err)
	}
	if i.virt != nil {
		return im.releaseVirtual(i, s, unclaim)
	}
	if err := im.dev.FreeAsync(i.p, s); err != nil {
		return unclaim(err)
	}
	im.mu.Lock()
	delete(im.imports, i.id)
	im.mu.Unlock()
	if err := im.giveBack(i.id, s); err != nil {
		return fmt.Errorf("ipc: release loan %d: %w", i.id, err)
	}
	return nil
}

// releaseVirtual is Release of an import of Virtual memory: an event
// after the work on s marks when the mapping may go; the give-back waits
// on the same event.
func (im *Importer) releaseVirtual(i *Import, s gpu.Stream, unclaim func(error) error) error {
	ev, err := im.events.Get()
	if err != nil {
		return unclaim(err)
	}
	if err := ev.Record(s); err != nil {
		im.events.Put(ev)
		return unclaim(err)
	}
	im.mu.Lock()
	delete(im.imports, i.id)
	im.mu.Unlock()
	im.rmu.Lock()
	im.unmaps = append(im.unmaps, pendingUnmap{ev: ev, m: i.virt})
	im.rmu.Unlock()
	err = im.giveBackAfter(i.id, ev)
	// What has completed is unmapped now; an error keeps it for later.
	_ = im.Reap()
	if err != nil {
		return fmt.Errorf("ipc: release loan %d: %w", i.id, err)
	}
	return nil
}

// Reap unmaps every released import of Virtual memory whose work has
// completed, without blocking (an event query each); the others stay
// mapped until a later Reap, Receive, Release or Close finds them done.
// An error (an unmap that failed) keeps that import for a later try.
func (im *Importer) Reap() error { return im.reap(false) }

// reap is Reap; with wait, it waits for each import's work first.
func (im *Importer) reap(wait bool) error {
	im.rmu.Lock()
	defer im.rmu.Unlock()
	var errs []error
	kept := im.unmaps[:0]
	for _, u := range im.unmaps {
		var err error
		if wait {
			err = u.ev.Synchronize()
		} else {
			err = u.ev.Query()
		}
		if err == nil {
			if err = u.m.Close(); err == nil {
				im.events.Put(u.ev)
				continue
			}
		}
		if !errors.Is(err, gpu.ErrNotReady) {
			errs = append(errs, fmt.Errorf("ipc: unmap a released import: %w", err))
		}
		kept = append(kept, u)
	}
	clear(im.unmaps[len(kept):])
	im.unmaps = kept
	return errors.Join(errs...)
}

// Unmapping is the number of released imports of Virtual memory still
// mapped, their work not yet known to be complete.
func (im *Importer) Unmapping() int {
	im.rmu.Lock()
	defer im.rmu.Unlock()
	return len(im.unmaps)
}

// giveBack orders the return event after s and sends the give-back of id.
func (im *Importer) giveBack(id uint64, s gpu.Stream) error {
	ev, err := im.events.Get()
	if err != nil {
		return err
	}
	defer im.events.Put(ev)
	if err := ev.Record(s); err != nil {
		return err
	}
	return im.giveBackAfter(id, ev)
}

// giveBackAfter orders the return event after ev, recorded after the
// importer's last use, and sends the give-back of id.
func (im *Importer) giveBackAfter(id uint64, ev gpu.Event) error {
	// The exporter's link reads give-backs as they come, so the socket
	// drains while the exporter runs; a lost exporter ends the write.
	ctx := context.Background()
	if err := im.wmu.lock(ctx); err != nil {
		return err
	}
	defer im.wmu.unlock()
	if err := im.retStream.WaitEvent(ev); err != nil {
		return err
	}
	if err := im.retEvent.Record(im.retStream); err != nil {
		return err
	}
	return writeLocked(ctx, im.conn, frame{kind: kindGiveBack, id: id})
}

// Pool is the imported pool; nil from an exporter of Virtual memory.
func (im *Importer) Pool() gpu.MemPool { return im.pool }

// Outstanding is the number of imports not yet released.
func (im *Importer) Outstanding() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return len(im.imports)
}

// Close releases every import still held, on the return stream after
// all work on the device (it cannot know the streams that used them),
// synchronizes the device so that every wait on the exporter's lend event
// has executed, says goodbye (loans sent but not received go back unused)
// and waits for the exporter's answer, after which its waits on the
// return event have executed; then it unmaps the released imports of
// Virtual memory and closes the connection and the imported pool and
// events.
func (im *Importer) Close() error {
	im.mu.Lock()
	if im.closed {
		im.mu.Unlock()
		return nil
	}
	im.closed = true
	close(im.closing)
	im.mu.Unlock()
	im.receiving.Wait()
	im.mu.Lock()
	held := make([]*Import, 0, len(im.imports))
	for _, i := range im.imports {
		held = append(held, i)
	}
	im.mu.Unlock()
	var errs []error
	if len(held) > 0 {
		errs = append(errs, im.dev.Synchronize())
	}
	for _, i := range held {
		if err := i.Release(im.retStream); err != nil && !errors.Is(err, ErrPeerLost) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, im.dev.Synchronize())
	im.mu.Lock()
	im.saidBye = true
	im.mu.Unlock()
	if err := im.sayBye(); err == nil {
		timeout := time.After(byeWait)
	wait:
		for {
			select {
			case m, ok := <-im.frames:
				if !ok {
					break wait
				}
				m.close()
			case <-timeout:
				errs = append(errs, fmt.Errorf("ipc: close: no answer to the goodbye in %v", byeWait))
				break wait
			}
		}
	} else if !errors.Is(err, ErrPeerLost) {
		errs = append(errs, err)
	}
	errs = append(errs, im.conn.Close())
	for m := range im.frames {
		m.close()
	}
	// The device was synchronized after the last release: every event
	// of unmaps has completed, and the wait returns at once.
	errs = append(errs, im.reap(true))
	errs = append(errs, im.retStream.Destroy(), im.retEvent.Destroy(), im.lendEvent.Destroy())
	if im.pool != nil {
		errs = append(errs, im.pool.Destroy())
	}
	errs = append(errs, im.events.Close())
	return errors.Join(errs...)
}
