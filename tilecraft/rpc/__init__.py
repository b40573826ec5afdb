"""The device pool: a tracker, device servers, and the autotune runner that uses them (rpyc).

    tracker = Tracker(port=9190, secret=secret).start()
    server = DeviceServer("llvm:znver3", secret=secret, tracker=("127.0.0.1", 9190)).start()
    runner = RPCRunner("llvm:znver3", "127.0.0.1", 9190, secret=secret, number=5)

Every connection proves knowledge of a shared secret before rpyc starts; services expose only
named methods taking and returning plain values (no classic mode, no pickles). See docs/rpc.md.
Importing this package imports rpyc; ``import tilecraft`` does not import this package.
"""
from .protocol import AuthenticationError, connect, generate_secret, load_secret, write_key_file
from .runner import PoolOptions, PoolUnavailableError, RPCRunner
from .server import DeviceServer
from .tracker import DevicePool, Lease, ServerInfo, Tracker, TrackerClient, TrackerStatus

__all__ = ["Tracker", "TrackerClient", "TrackerStatus", "ServerInfo", "Lease", "DevicePool", "DeviceServer",
           "RPCRunner", "PoolOptions", "PoolUnavailableError", "AuthenticationError", "connect", "load_secret", "generate_secret", "write_key_file"]
