"""A test of the shim without a GPU, PyTorch or CuPy: the library on the
simulated GPU, through ctypes as the shim loads it.

    scripts/build-capi.sh && python3 python/test_streamalloc_torch.py [upstream=vmm]

The optional argument is an item added to the pool's configuration.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import streamalloc_torch as sa  # noqa: E402


def main():
    extra = sys.argv[1] if len(sys.argv) > 1 else ""
    vmm = extra == "upstream=vmm"
    lib = sa.use_streamalloc(conf="pool,backend=sim,sim_capacity=1GiB" + ("," + extra if extra else ""), torch=False)
    p = lib.sa_torch_alloc(3 << 20, 0, None)
    assert p, sa.last_error()
    s = sa.stats()
    assert s["live_bytes"] == 3 << 20 and s["allocs"] == 1, s
    assert s["peak_reserved_bytes"] >= s["live_bytes"], s
    assert s["vmm_fallback"] == 0, s
    if vmm:
        # The memory mapped: two granules of 2 MiB for 3 MiB; the address
        # space around it holds none.
        assert s["reserved_bytes"] == 4 << 20 and s["address_space_bytes"] > s["reserved_bytes"], s
        assert "address space" in sa.summary()
    else:
        assert s["address_space_bytes"] == 0, s
    lib.sa_torch_free(p, 3 << 20, 0, None)
    lib.sa_torch_free(p, 3 << 20, 0, None)  # a bad free: counted, no crash
    s = sa.stats()
    assert s["live_bytes"] == 0 and s["bad_free_count"] == 1, s
    assert not lib.sa_torch_alloc(4 << 30, 0, None)  # out of memory: NULL
    assert sa.stats()["oom_count"] == 1
    try:
        sa.use_streamalloc(conf="async,backend=sim", torch=False)
        raise AssertionError("configured after first use")
    except RuntimeError as e:
        assert "already in use" in str(e), e
    sa.empty_cache()
    assert sa.stats()["reserved_bytes"] == 0
    print(sa.summary())
    print("shim test ok")


if __name__ == "__main__":
    main()
