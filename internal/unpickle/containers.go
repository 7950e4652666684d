// Building containers from the stack.
//
// Items go into a container only while it is on the stack, before it is
// placed in another: placing it seals it (a change afterwards is
// ErrUnsupported), which is what Python's pickler writes (a container is
// filled right after it is memoized) and what keeps every decoded value
// acyclic and its depth exact: a container's depth is final when it is
// placed, so its parent's is one more than the deepest of its items.

package unpickle

import "slices"

// place checks that item may go into the container c, whose depth is
// *depth: c must not be item itself, and its depth with item in it must
// be within the bound. It then seals item, which may not change from now
// on, and updates c's depth.
func (d *decoder) place(c any, depth *int32, item any) error {
	if item == c {
		return d.failAt(ErrUnsupported, "a %s that contains itself", TypeName(c))
	}
	id := depthOf(item) + 1
	if id > d.maxDepth {
		return d.failAt(ErrDepth, "containers nested more than %d deep", d.maxDepth)
	}
	if is := shapeOf(item); is != nil {
		is.sealed = true
	}
	if id > *depth {
		*depth = id
	}
	return nil
}

// changeable checks that a container may still take items.
func (d *decoder) changeable(c any, s *shape) error {
	if s.sealed {
		return d.failAt(ErrUnsupported, "a %s changed after it was placed in another container (a cycle, or a pickle Python's pickler does not write)", TypeName(c))
	}
	return nil
}

// tuple replaces the stack entries from height k with a tuple of them.
func (d *decoder) tuple(k int) error {
	t := &Tuple{Items: make([]any, len(d.stack)-k), depth: 1}
	for i, v := range d.stack[k:] {
		if err := d.place(t, &t.depth, v); err != nil {
			return err
		}
		t.Items[i] = v
	}
	d.truncateStack(k)
	d.push(t)
	return nil
}

// appendTo appends the stack entries from height k to the list below
// them, and drops them.
func (d *decoder) appendTo(k int) error {
	l, ok := d.stack[k-1].(*List)
	if !ok {
		sentinel := ErrInvalid
		if _, ok := d.stack[k-1].(Bytes); ok {
			sentinel = ErrUnsupported // a bytearray, which Python extends
		}
		return d.failAt(sentinel, "%s to a %s", opName(d.op), TypeName(d.stack[k-1]))
	}
	if k == len(d.stack) {
		return nil // nothing to append
	}
	return d.appendItems(l, k)
}

// appendItems appends the stack entries from height k to l, and drops
// them.
func (d *decoder) appendItems(l *List, k int) error {
	if err := d.changeable(l, &l.shape); err != nil {
		return err
	}
	l.Items = slices.Grow(l.Items, len(d.stack)-k) // amortized, as append
	for _, v := range d.stack[k:] {
		if err := d.place(l, &l.depth, v); err != nil {
			return err
		}
		l.Items = append(l.Items, v)
	}
	d.truncateStack(k)
	return nil
}

// setItemsOf sets the key and value pairs on the stack from height k in
// the dict below them, and drops them.
func (d *decoder) setItemsOf(k int) error {
	if k == len(d.stack) {
		return nil
	}
	m, ok := d.stack[k-1].(*Dict)
	if !ok {
		sentinel := ErrInvalid
		switch d.stack[k-1].(type) {
		case *List, Bytes:
			sentinel = ErrUnsupported // Python sets items by index
		}
		return d.failAt(sentinel, "%s on a %s", opName(d.op), TypeName(d.stack[k-1]))
	}
	return d.setItems(m, k)
}

// setItems sets the key and value pairs on the stack from height k in m,
// and drops them.
func (d *decoder) setItems(m *Dict, k int) error {
	if (len(d.stack)-k)%2 != 0 {
		return d.failAt(ErrInvalid, "an odd number of items for %s", opName(d.op))
	}
	if err := d.changeable(m, &m.shape); err != nil {
		return err
	}
	m.keys.list = slices.Grow(m.keys.list, (len(d.stack)-k)/2)
	m.vals = slices.Grow(m.vals, (len(d.stack)-k)/2)
	for i := k; i < len(d.stack); i += 2 {
		key, v := d.stack[i], d.stack[i+1]
		if err := d.checkKey(key); err != nil {
			return err
		}
		if err := d.place(m, &m.depth, v); err != nil {
			return err
		}
		m.put(key, v)
	}
	d.truncateStack(k)
	return nil
}

// addItems adds the stack entries from height k to s, and drops them.
func (d *decoder) addItems(s *Set, k int) error {
	if err := d.changeable(s, &s.shape); err != nil {
		return err
	}
	for _, v := range d.stack[k:] {
		if err := d.checkKey(v); err != nil {
			return err
		}
		s.keys.add(v)
	}
	d.truncateStack(k)
	return nil
}

// checkKey checks a dict key or set element.
func (d *decoder) checkKey(v any) error {
	if hashable(v) {
		return nil
	}
	switch v.(type) {
	case *List, *Dict:
		return d.failAt(ErrInvalid, "a %s as a dict key or set element (unhashable in Python)", TypeName(v))
	case *Set:
		if !v.(*Set).Frozen {
			return d.failAt(ErrInvalid, "a set as a dict key or set element (unhashable in Python)")
		}
	}
	return d.failAt(ErrUnsupported, "a %s as a dict key or set element", TypeName(v))
}
