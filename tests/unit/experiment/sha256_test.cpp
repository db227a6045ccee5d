#include <catch2/catch.hpp>

#include "lpemu/io/sha256.hpp"

namespace {

// FIPS 180-4 example messages (NIST CSRC "SHA256.pdf" examples): "abc" and the 448-bit message.
TEST_CASE("SHA-256 matches the FIPS 180-4 examples", "[io][unit]") {
  CHECK(lpemu::io::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(lpemu::io::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(lpemu::io::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
