package devarena

import "testing"

// The behaviour tests, on the device testDevice chooses (the simulator by
// default; the GPU with STREAMALLOC_DEVICE=cuda). The bad-input tests use
// a second, simulated, device as "another device".

func TestLayout(t *testing.T)   { testLayout(t, testDevice(t)) }
func TestTag(t *testing.T)      { testTag(t, testDevice(t)) }
func TestOverflow(t *testing.T) { testOverflow(t, testDevice(t)) }
func TestReset(t *testing.T)    { testReset(t, testDevice(t)) }
func TestBump(t *testing.T)     { testBump(t, testDevice(t)) }
func TestClosed(t *testing.T)   { testClosed(t, testDevice(t)) }
func TestSet(t *testing.T)      { testSet(t, testDevice(t)) }
func TestHuge(t *testing.T)     { testHuge(t, testDevice(t)) }

func TestBadInput(t *testing.T)     { testBadInput(t, testDevice(t), simDevice(t)) }
func TestCloseFailure(t *testing.T) { testCloseFailure(t, testDevice(t)) }
