// The answer of the driver's INTEGRITY_CHECK export table
// (d4082055-bde6-704b-8d34-ba123c66e1f2, slot 1), which the CUDA runtime
// asks before it uses the driver: without the expected answer it fails
// every call with cudaErrorSoftwareValidityNotEstablished (or, for a
// missing table, "named symbol not found"). Established from ZLUDA's public
// reimplementation (docs/export-tables-research.md, docs/interposer.md
// "Export tables"): for most versions it is HMAC-MD2, keyed with a fixed
// 16-byte key, of the call's inputs, the process's identity, the addresses
// of the driver's own tables and of the function itself, and every
// device's UUID and PCI location. Pure functions: export_tables.cc supplies
// the process's values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace phos::client {

/// MD2 (RFC 1319): 16-byte digest of `data`. Not a library call: MD2 is
/// disabled in Debian's OpenSSL and libgcrypt, and the runtime's check
/// needs exactly it.
void Md2(std::span<const uint8_t> data, uint8_t digest[16]);

/// HMAC (RFC 2104) over MD2 (block size 16) with a 16-byte key.
void HmacMd2(const uint8_t key[16], std::span<const uint8_t> message, uint8_t mac[16]);

/// One device, as the check hashes it.
struct IntegrityDevice {
  uint8_t uuid[16];
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};
static_assert(sizeof(IntegrityDevice) == 28);

/// Everything the answer depends on besides the devices.
struct IntegrityInputs {
  uint32_t driver_version;  // as cuDriverGetVersion
  uint32_t version;         // the runtime's argument
  uint32_t process;         // getpid()
  uint32_t thread;          // (uint32_t) pthread_self()
  const void* cudart_table;     // this driver's CUDART_INTERFACE table
  const void* integrity_table;  // its INTEGRITY_CHECK table
  const void* function;         // INTEGRITY_CHECK slot 1
  uint64_t unix_seconds;    // the runtime's argument
};
static_assert(sizeof(IntegrityInputs) == 48);

/// The two words the runtime expects.
void IntegrityAnswer(const IntegrityInputs& in, std::span<const IntegrityDevice> devices, uint64_t out[2]);

}  // namespace phos::client
