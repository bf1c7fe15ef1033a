// placeholder; the v8 shim is being written
