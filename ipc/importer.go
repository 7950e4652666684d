// The importing side: the exporter's pool imported once per connection,
// each loan imported as it is received, and given back in stream order.
//
// Invariants: imports holds every import received and not yet released,
// under Importer.mu; a release unmaps the import (FreeAsync on its
// stream) before its give-back frame is sent, and the return event is
// recorded on the return stream after that free, so the exporter's wait
// on it orders its free after the importer's. A lend frame that cannot be
// imported is given back at once, so the exporter's memory is never
// stranded by an importer's failure.

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
)

// Importer receives an exporter's loans over one connection. It is safe
// for concurrent use.
type Importer struct {
	dev       gpu.Device
	x         gpu.IPC
	conn      *net.UnixConn
	pool      gpu.MemPool // imported
	lendEvent gpu.Event   // the exporter's, imported
	retStream gpu.Stream
	retEvent  gpu.Event // interprocess, recorded only on retStream
	events    gpu.EventCache
	frames    chan frame
	readErr   error // why frames closed; written before close(frames)

	wmu writeLock // give-backs: the return event's record with its frame

	mu        sync.Mutex
	imports   map[uint64]*Import
	closed    bool           // Close was called: Receive refuses
	closing   chan struct{}  // closed by Close: a waiting Receive gives up
	receiving sync.WaitGroup // Receives under way, which Close waits for
	saidBye   bool           // this side said goodbye: lends are dropped
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
		frames: make(chan frame, 64), imports: make(map[uint64]*Import), closing: make(chan struct{}), wmu: newWriteLock()}
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
	sh := gpu.Shareable{Type: gpu.HandleType(f.handle), Fabric: f.a, File: file}
	im.pool, err = x.ImportMemPool(sh)
	if file != nil {
		file.Close() // imported, or refused: either way no longer needed
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: accept: the pool: %w", err)
	}
	undo = append(undo, func() { im.pool.Destroy() })
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
// descriptor.
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
	if err == nil && (file == nil) != (gpu.HandleType(f.handle) == gpu.HandleFabric) {
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
// Lends after this side's goodbye are dropped: the exporter takes them
// back unused at the goodbye.
func (im *Importer) read() {
	for {
		f, err := readFrame(im.conn, kindLend)
		if err != nil {
			im.finish(err)
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
		if !drop {
			im.frames <- f
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
	done bool // under im.mu
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
	var f frame
	select {
	case fr, ok := <-im.frames:
		if !ok {
			return nil, fmt.Errorf("ipc: receive: %w", im.readErr)
		}
		f = fr
	case <-ctx.Done():
		return nil, fmt.Errorf("ipc: receive: %w", ctx.Err())
	case <-im.closing:
		return nil, fmt.Errorf("ipc: receive: %w", ErrClosed)
	}
	p, err := im.x.ImportPointer(im.pool, gpu.PtrExportData(f.a))
	if err == nil {
		if werr := s.WaitEvent(im.lendEvent); werr != nil {
			err = errors.Join(werr, im.dev.FreeAsync(p, s))
		}
	}
	if err != nil {
		// Give the loan back at once; nothing of it was used here.
		if gerr := im.giveBack(f.id, s); gerr != nil {
			err = errors.Join(err, gerr)
		}
		return nil, fmt.Errorf("ipc: receive loan %d: %w", f.id, err)
	}
	i := &Import{im: im, id: f.id, p: p, size: int(f.size)}
	im.mu.Lock()
	im.imports[f.id] = i
	im.mu.Unlock()
	return i, nil
}

// Release unmaps the import after the work enqueued on s so far and gives
// the loan back: the exporter's next work on the allocation waits for it.
// A second Release is ErrReleased. If the exporter is gone the import is
// unmapped all the same and the error matches ErrPeerLost.
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
	if err := im.dev.FreeAsync(i.p, s); err != nil {
		im.mu.Lock()
		i.done = false
		im.mu.Unlock()
		return fmt.Errorf("ipc: release loan %d: %w", i.id, err)
	}
	im.mu.Lock()
	delete(im.imports, i.id)
	im.mu.Unlock()
	if err := im.giveBack(i.id, s); err != nil {
		return fmt.Errorf("ipc: release loan %d: %w", i.id, err)
	}
	return nil
}

// giveBack orders the return event after s and sends the give-back of id.
func (im *Importer) giveBack(id uint64, s gpu.Stream) error {
	// The exporter's link reads give-backs as they come, so the socket
	// drains while the exporter runs; a lost exporter ends the write.
	ctx := context.Background()
	if err := im.wmu.lock(ctx); err != nil {
		return err
	}
	defer im.wmu.unlock()
	ev, err := im.events.Get()
	if err != nil {
		return err
	}
	defer im.events.Put(ev)
	if err := ev.Record(s); err != nil {
		return err
	}
	if err := im.retStream.WaitEvent(ev); err != nil {
		return err
	}
	if err := im.retEvent.Record(im.retStream); err != nil {
		return err
	}
	return writeLocked(ctx, im.conn, frame{kind: kindGiveBack, id: id})
}

// Pool is the imported pool.
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
// return event have executed; then it closes the connection and the
// imported pool and events.
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
			case _, ok := <-im.frames:
				if !ok {
					break wait
				}
			case <-timeout:
				errs = append(errs, fmt.Errorf("ipc: close: no answer to the goodbye in %v", byeWait))
				break wait
			}
		}
	} else if !errors.Is(err, ErrPeerLost) {
		errs = append(errs, err)
	}
	errs = append(errs, im.conn.Close())
	for range im.frames {
	}
	errs = append(errs, im.retStream.Destroy(), im.retEvent.Destroy(), im.lendEvent.Destroy(), im.pool.Destroy(), im.events.Close())
	return errors.Join(errs...)
}
