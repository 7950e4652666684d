// Vector[T]: a Buffer seen as an array of T.
//
// T must be a type whose values are plain bytes: numbers, bools, and
// arrays and structs of them. Types holding Go pointers (pointers, slices,
// strings, maps, channels, functions, interfaces) are refused at
// construction with an *ElemTypeError, because device memory is invisible
// to the garbage collector and a pointer there would be meaningless to a
// kernel. Zero-size types are refused too. The check is done once per type
// and cached.
//
// Host slices are copied through an unsafe byte view of their backing
// array, which is sound exactly because T holds no pointers.

package buf

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Vector is a device array of n values of T, over a Buffer of n*sizeof(T)
// bytes. It is safe for concurrent use, as Buffer.
type Vector[T any] struct {
	b *Buffer
}

var elemChecks sync.Map // reflect.Type -> error (nil if allowed)

// checkElem reports whether values of t can live in device memory.
func checkElem(t reflect.Type) error {
	if v, ok := elemChecks.Load(t); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	var err error
	if t.Size() == 0 {
		err = &ElemTypeError{Type: t, Reason: "size zero"}
	} else if bad := pointerPath(t); bad != "" {
		err = &ElemTypeError{Type: t, Reason: "holds a pointer (" + bad + ")"}
	}
	if err == nil {
		elemChecks.Store(t, nil)
	} else {
		elemChecks.Store(t, err)
	}
	return err
}

// pointerPath names the first part of t that holds a pointer, or "".
func pointerPath(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		if t.Len() == 0 {
			return ""
		}
		if p := pointerPath(t.Elem()); p != "" {
			return "[]" + p
		}
		return ""
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if p := pointerPath(f.Type); p != "" {
				return "field " + f.Name + ": " + p
			}
		}
		return ""
	}
	return t.Kind().String()
}

func elemSize[T any]() int {
	var zero T
	return int(unsafe.Sizeof(zero))
}

// NewVector allocates a vector of n values of T from res, ordered on s, as
// New (a nil res is the current resource of s's device). The contents are
// uninitialized.
func NewVector[T any](res mr.Resource, n int, s gpu.Stream, opts ...Option) (*Vector[T], error) {
	if err := checkElem(reflect.TypeFor[T]()); err != nil {
		return nil, fmt.Errorf("buf: new vector: %w", err)
	}
	es := elemSize[T]()
	if n < 0 || n > math.MaxInt/es {
		return nil, fmt.Errorf("buf: new vector of %d elements of %d bytes: %w", n, es, mr.ErrInvalidSize)
	}
	b, err := New(res, n*es, s, opts...)
	if err != nil {
		return nil, err
	}
	return &Vector[T]{b: b}, nil
}

// bytesOf is the backing array of s as bytes; T holds no pointers.
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*elemSize[T]())
}

func (v *Vector[T]) buf() (*Buffer, error) {
	if v == nil || v.b == nil {
		return nil, ErrNilBuffer
	}
	return v.b, nil
}

// Buffer is the vector's underlying buffer.
func (v *Vector[T]) Buffer() *Buffer {
	if v == nil {
		return nil
	}
	return v.b
}

// Len is the number of elements, or 0 once the vector is closed.
func (v *Vector[T]) Len() int {
	if v == nil || v.b == nil {
		return 0
	}
	return v.b.Size() / elemSize[T]()
}

// Ptr is the device address of element 0, or 0 once closed.
func (v *Vector[T]) Ptr() gpu.DevicePtr {
	if v == nil {
		return 0
	}
	return v.b.Ptr()
}

// Stream is the stream the vector is ordered on.
func (v *Vector[T]) Stream() gpu.Stream {
	if v == nil {
		return nil
	}
	return v.b.Stream()
}

// SetStream is Buffer.SetStream.
func (v *Vector[T]) SetStream(s gpu.Stream) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: set stream: %w", err)
	}
	return b.SetStream(s)
}

// CopyFromHost copies src, which must hold exactly Len() elements, into
// the vector.
func (v *Vector[T]) CopyFromHost(src []T) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: copy from host: %w", err)
	}
	return b.CopyFromHost(bytesOf(src))
}

// CopyFromHostAt copies src into the vector starting at element i.
func (v *Vector[T]) CopyFromHostAt(i int, src []T) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: copy from host: %w", err)
	}
	off, err := elemOffset[T](i)
	if err != nil {
		return fmt.Errorf("buf: copy from host: %w", err)
	}
	return b.CopyFromHostAt(off, bytesOf(src))
}

// CopyToHost copies the vector into dst, which must hold exactly Len()
// elements; dst is valid once the stream is synchronized past the copy.
func (v *Vector[T]) CopyToHost(dst []T) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: copy to host: %w", err)
	}
	return b.CopyToHost(bytesOf(dst))
}

// CopyToHostAt copies len(dst) elements starting at element i into dst.
func (v *Vector[T]) CopyToHostAt(dst []T, i int) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: copy to host: %w", err)
	}
	off, err := elemOffset[T](i)
	if err != nil {
		return fmt.Errorf("buf: copy to host: %w", err)
	}
	return b.CopyToHostAt(bytesOf(dst), off)
}

// CopyFrom copies all of src, which must have the same length, into v on
// v's stream.
func (v *Vector[T]) CopyFrom(src *Vector[T]) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: copy: %w", err)
	}
	sb, err := src.buf()
	if err != nil {
		return fmt.Errorf("buf: copy: %w", err)
	}
	return b.CopyFrom(sb)
}

// Memset sets every byte of the vector to c (Memset(0) zeroes it).
func (v *Vector[T]) Memset(c byte) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: memset: %w", err)
	}
	return b.Memset(c)
}

// Resize makes the vector n elements long, as Buffer.Resize.
func (v *Vector[T]) Resize(n int) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: resize: %w", err)
	}
	es := elemSize[T]()
	if n < 0 || n > math.MaxInt/es {
		return fmt.Errorf("buf: resize to %d elements: %w", n, mr.ErrInvalidSize)
	}
	return b.Resize(n * es)
}

// Use is Buffer.Use.
func (v *Vector[T]) Use(s gpu.Stream, a Access, fn func() error) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: use: %w", err)
	}
	return b.Use(s, a, fn)
}

// Prepare is Buffer.Prepare.
func (v *Vector[T]) Prepare(s gpu.Stream, a Access) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: prepare: %w", err)
	}
	return b.Prepare(s, a)
}

// Finish is Buffer.Finish.
func (v *Vector[T]) Finish(s gpu.Stream, a Access) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: finish: %w", err)
	}
	return b.Finish(s, a)
}

// Ref is a Ref to the vector's current allocation.
func (v *Vector[T]) Ref() Ref {
	if v == nil {
		return Ref{}
	}
	return v.b.Ref()
}

// Close is Buffer.Close.
func (v *Vector[T]) Close() error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: close: %w", err)
	}
	return b.Close()
}

// CloseOn is Buffer.CloseOn.
func (v *Vector[T]) CloseOn(s gpu.Stream) error {
	b, err := v.buf()
	if err != nil {
		return fmt.Errorf("buf: close: %w", err)
	}
	return b.CloseOn(s)
}

func elemOffset[T any](i int) (int, error) {
	es := elemSize[T]()
	if i < 0 || i > math.MaxInt/es {
		return 0, fmt.Errorf("element %d: %w", i, ErrOutOfRange)
	}
	return i * es, nil
}
