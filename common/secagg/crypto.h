// The cryptography secure aggregation needs (SecAgg, Bonawitz et al. CCS'17; SecAgg+, Bell et
// al. CCS'20), each from a vetted library: X25519 key pairs, key agreement and authenticated
// encryption from libsodium (crypto_box, crypto_scalarmult, BLAKE2b), random bytes from the
// kernel through libsodium, and t-of-n Shamir sharing over GF(2^8) from libgfshare (its random
// coefficients drawn with libsodium, never with random()). Nothing here is a primitive of our
// own.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps::secagg {

constexpr size_t kKeyBytes = 32;   // X25519 public and secret keys
constexpr size_t kSeedBytes = 32;  // mask seeds, the PRG's key
using Key = std::array<uint8_t, kKeyBytes>;
using Seed = std::array<uint8_t, kSeedBytes>;

struct KeyPair {
  Key pk{};
  Key sk{};
};

// Initializes libsodium and gives libgfshare its random source; safe to call many times.
// Every function below calls it.
Status Init();

KeyPair NewKeyPair();
Seed RandomSeed();
// The public key of secret key `sk`.
Key PublicOf(const Key& sk);
// BLAKE2b-256 of `bytes` (a commitment to a seed).
std::string Hash(const std::string& bytes);
// Key bytes from a message field, or why not.
StatusOr<Key> KeyFrom(const std::string& bytes, const char* what);

// The mask seed clients `a` and `b` share in `round`: BLAKE2b of the X25519 agreement of one's
// secret key with the other's public key and the round and both ids, the same from either
// side. Refuses a public key that gives no agreement (a low-order point).
StatusOr<Seed> AgreeSeed(const Key& my_sk, const Key& peer_pk, int64_t round, int32_t a, int32_t b);

// `plain` encrypted and authenticated from the holder of `my_sk` to the holder of `peer_pk`
// (crypto_box: X25519, XSalsa20-Poly1305), a fresh nonce first; Open reverses it and refuses
// anything that was not sealed by `peer_pk`'s holder for `my_sk`'s, or was altered. Seal refuses
// a public key that gives no shared key.
StatusOr<std::string> Seal(const std::string& plain, const Key& peer_pk, const Key& my_sk);
StatusOr<std::string> Open(const std::string& sealed, const Key& peer_pk, const Key& my_sk);

// Shamir's t-of-n sharing of `secret` at the points `xs` (distinct, 1..255): shares[i] is the
// share at xs[i], as long as the secret. Any `threshold` of them give the secret back, fewer
// tell nothing about it. REQUIRES: 1 <= threshold <= xs.size().
std::vector<std::string> Split(const std::string& secret, const std::vector<uint8_t>& xs,
                               int threshold);
// The secret from shares at the points `xs` (as many as the threshold, or more), or why not.
StatusOr<std::string> Combine(const std::vector<uint8_t>& xs,
                              const std::vector<std::string>& shares);

}  // namespace hetps::secagg
