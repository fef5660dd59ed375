"""The bench JSON's device identity (CPU: a stand-in for CuPy's runtime module)."""

from types import SimpleNamespace

from ninferc.bench import device_identity


def _cp(driver=13000, runtime=13000):
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(
        driverGetVersion=lambda: driver, runtimeGetVersion=lambda: runtime)))


def test_device_identity_names_the_physical_gpu():
    props = {"uuid": bytes(range(16)), "pciDomainID": 0, "pciBusID": 0x1B, "pciDeviceID": 0, "clockRate": 1980000,
             "memoryClockRate": 0}
    out = device_identity(_cp(13000, 12080), props)
    assert out == {"uuid": "000102030405060708090a0b0c0d0e0f", "pci_bus_id": "0000:1b:00", "clock_khz": 1980000,
                   "driver": "13.0", "runtime": "12.8"}  # a zero clock (not reported) is left out


def test_device_identity_leaves_out_what_the_runtime_lacks():
    assert device_identity(SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace())), {"uuid": b""}) == {}
