#include "common/secagg/crypto.h"

#include <fmt/format.h>
#include <sodium.h>

extern "C" {  // libgfshare's header declares C functions without saying so
#include <libgfshare.h>
}

#include <cstring>
#include <memory>
#include <mutex>

namespace hetps::secagg {
namespace {

void SodiumRandom(unsigned char* buffer, unsigned int size) { randombytes_buf(buffer, size); }

using ShareCtx = std::unique_ptr<gfshare_ctx, decltype(&gfshare_ctx_free)>;

// libgfshare keeps its state in a context per call; its random source is one global, set once.
std::mutex& GfshareMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Status Init() {
  static const bool ok = [] {
    if (sodium_init() < 0) return false;
    gfshare_fill_rand = SodiumRandom;
    return true;
  }();
  return ok ? Status() : Status::Internal("libsodium failed to initialize");
}

KeyPair NewKeyPair() {
  (void)Init();
  KeyPair k;
  crypto_box_keypair(k.pk.data(), k.sk.data());
  return k;
}

Seed RandomSeed() {
  (void)Init();
  Seed s;
  randombytes_buf(s.data(), s.size());
  return s;
}

Key PublicOf(const Key& sk) {
  (void)Init();
  Key pk;
  crypto_scalarmult_base(pk.data(), sk.data());
  return pk;
}

std::string Hash(const std::string& bytes) {
  (void)Init();
  std::string out(crypto_generichash_BYTES, '\0');
  crypto_generichash(reinterpret_cast<uint8_t*>(out.data()), out.size(),
                     reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr, 0);
  return out;
}

StatusOr<Key> KeyFrom(const std::string& bytes, const char* what) {
  if (bytes.size() != kKeyBytes) {
    return Status::Malformed(
        fmt::format("{}: {} bytes, a key has {}", what, bytes.size(), kKeyBytes));
  }
  Key k;
  std::memcpy(k.data(), bytes.data(), kKeyBytes);
  return k;
}

StatusOr<Seed> AgreeSeed(const Key& my_sk, const Key& peer_pk, int64_t round, int32_t a,
                         int32_t b) {
  (void)Init();
  uint8_t shared[crypto_scalarmult_BYTES];
  if (crypto_scalarmult(shared, my_sk.data(), peer_pk.data()) != 0) {
    return Status::Malformed("a mask public key gives no key agreement (a low-order point)");
  }
  const int32_t lo = std::min(a, b), hi = std::max(a, b);
  crypto_generichash_state h;
  crypto_generichash_init(&h, nullptr, 0, kSeedBytes);
  crypto_generichash_update(&h, shared, sizeof shared);
  crypto_generichash_update(&h, reinterpret_cast<const uint8_t*>(&round), sizeof round);
  crypto_generichash_update(&h, reinterpret_cast<const uint8_t*>(&lo), sizeof lo);
  crypto_generichash_update(&h, reinterpret_cast<const uint8_t*>(&hi), sizeof hi);
  Seed seed;
  crypto_generichash_final(&h, seed.data(), seed.size());
  sodium_memzero(shared, sizeof shared);
  return seed;
}

StatusOr<std::string> Seal(const std::string& plain, const Key& peer_pk, const Key& my_sk) {
  (void)Init();
  std::string out(crypto_box_NONCEBYTES + crypto_box_MACBYTES + plain.size(), '\0');
  auto* nonce = reinterpret_cast<uint8_t*>(out.data());
  randombytes_buf(nonce, crypto_box_NONCEBYTES);
  if (crypto_box_easy(nonce + crypto_box_NONCEBYTES, reinterpret_cast<const uint8_t*>(plain.data()),
                      plain.size(), nonce, peer_pk.data(), my_sk.data()) != 0) {
    return Status::Malformed("a cipher public key gives no shared key (a low-order point)");
  }
  return out;
}

StatusOr<std::string> Open(const std::string& sealed, const Key& peer_pk, const Key& my_sk) {
  (void)Init();
  if (sealed.size() < crypto_box_NONCEBYTES + crypto_box_MACBYTES) {
    return Status::Malformed(fmt::format("a sealed share of {} bytes is too short", sealed.size()));
  }
  const auto* nonce = reinterpret_cast<const uint8_t*>(sealed.data());
  const size_t n = sealed.size() - crypto_box_NONCEBYTES;
  std::string plain(n - crypto_box_MACBYTES, '\0');
  if (crypto_box_open_easy(reinterpret_cast<uint8_t*>(plain.data()), nonce + crypto_box_NONCEBYTES,
                           n, nonce, peer_pk.data(), my_sk.data()) != 0) {
    return Status::Malformed("a sealed share does not open: not sealed by its sender for us");
  }
  return plain;
}

std::vector<std::string> Split(const std::string& secret, const std::vector<uint8_t>& xs,
                               int threshold) {
  (void)Init();
  std::vector<uint8_t> points = xs;
  std::vector<std::string> shares(xs.size(), std::string(secret.size(), '\0'));
  std::lock_guard lock(GfshareMutex());
  ShareCtx ctx(gfshare_ctx_init_enc(points.data(), static_cast<unsigned>(points.size()),
                                    static_cast<unsigned char>(threshold),
                                    static_cast<unsigned>(secret.size())),
               gfshare_ctx_free);
  std::string copy = secret;
  gfshare_ctx_enc_setsecret(ctx.get(), reinterpret_cast<unsigned char*>(copy.data()));
  for (size_t i = 0; i < shares.size(); ++i) {
    gfshare_ctx_enc_getshare(ctx.get(), static_cast<unsigned char>(i),
                             reinterpret_cast<unsigned char*>(shares[i].data()));
  }
  sodium_memzero(copy.data(), copy.size());
  return shares;
}

StatusOr<std::string> Combine(const std::vector<uint8_t>& xs,
                              const std::vector<std::string>& shares) {
  (void)Init();
  if (xs.empty() || xs.size() != shares.size()) {
    return Status::InvalidArgument(
        fmt::format("{} share points for {} shares", xs.size(), shares.size()));
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] == 0 || shares[i].size() != shares[0].size()) {
      return Status::Malformed("a share at point 0, or of another length than the others");
    }
    for (size_t j = 0; j < i; ++j) {
      if (xs[j] == xs[i]) return Status::Malformed(fmt::format("two shares at point {}", xs[i]));
    }
  }
  std::vector<uint8_t> points = xs;
  std::string secret(shares[0].size(), '\0');
  std::lock_guard lock(GfshareMutex());
  ShareCtx ctx(gfshare_ctx_init_dec(points.data(), static_cast<unsigned>(points.size()),
                                    static_cast<unsigned>(secret.size())),
               gfshare_ctx_free);
  for (size_t i = 0; i < shares.size(); ++i) {
    std::string s = shares[i];
    gfshare_ctx_dec_giveshare(ctx.get(), static_cast<unsigned char>(i),
                              reinterpret_cast<unsigned char*>(s.data()));
  }
  gfshare_ctx_dec_extract(ctx.get(), reinterpret_cast<unsigned char*>(secret.data()));
  return secret;
}

}  // namespace hetps::secagg
