#!/usr/bin/env python3
"""Prints a free TCP port on 127.0.0.1 below the kernel's ephemeral range, for the SWARM
tests that must know the trainer's port in advance. Below the range: while a trainer is
down, its workers' reconnect attempts and other sockets take ephemeral ports, and one of
them could hold the trainer's (a loopback connect to a port nobody listens on may connect
to itself). Standard library only."""
import random
import socket
import sys

low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    port = random.randrange(10000, low)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    sys.exit(0)
sys.exit("free_port: no free port found below the ephemeral range")
