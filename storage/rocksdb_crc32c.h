// RocksDB's CRC-32C, computed by Strata's (storage/crc32c.h) in every
// program that links strata_storage.
//
// Debian builds RocksDB portable, without SSE4.2, so the library computes
// the CRC-32C of every record it writes from tables, 8 bytes a step: for
// each blob the RAM tier spills, 17% of bench/tier.sh's CPU by perf
// before this wrapper. Its CRC function, rocksdb::crc32c::Extend, is
// called from the library's other object files, and the linker's --wrap
// option (set on strata_storage for the programs that link it, on x86-64)
// sends those calls to Strata's function instead. Same function, same values:
// the test checks the standard's value through RocksDB's own checksum
// code, and Strata's function is tested against a table version.
#ifndef STRATA_STORAGE_ROCKSDB_CRC32C_H_
#define STRATA_STORAGE_ROCKSDB_CRC32C_H_

namespace strata {

// Whether RocksDB's own CRC-32C calls reach Strata's. False where they do
// not pass through the wrapped symbol (a RocksDB built with LTO that
// inlines them, or linked as a shared library): it then computes them as
// it was built to, correctly.
bool RocksDbCrc32cIsStratas();

}  // namespace strata

#endif  // STRATA_STORAGE_ROCKSDB_CRC32C_H_
