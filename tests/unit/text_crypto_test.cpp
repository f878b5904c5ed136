#include <gtest/gtest.h>

#include "aws/text.hpp"
#include "common/crypto.hpp"
#include "common/redact.hpp"
#include "sqs/md5.hpp"

using namespace sluice;

TEST(Crypto, KnownDigests) {
  EXPECT_EQ(crypto::sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(crypto::md5_hex("hi"), "49f68a5c8493ec2c0bf489821c21fc3b");
  // RFC 4231 test case 2
  EXPECT_EQ(crypto::hex(crypto::hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// RFC 4231's HMAC-SHA-256 cases around the block size (HMAC is built on the digest
// here): a short key, a key longer than the block (hashed first), long data; and the
// same again, so that a reused context carries nothing over.
TEST(Crypto, HmacSha256IsRfc4231s) {
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(crypto::hex(crypto::hmac_sha256(std::string(20, '\x0b'), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(
        crypto::hex(crypto::hmac_sha256(std::string(131, '\xaa'),
                                        "Test Using Larger Than Block-Size Key - Hash Key First")),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    EXPECT_EQ(crypto::hex(crypto::hmac_sha256(
                  std::string(131, '\xaa'),
                  "This is a test using a larger than block-size key and a larger than block-size "
                  "data. The key needs to be hashed before being used by the HMAC algorithm.")),
              "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    EXPECT_EQ(crypto::md5_hex("hi"), "49f68a5c8493ec2c0bf489821c21fc3b");
  }
}

TEST(Crypto, Base64RoundTripsAllLengthsAndRejectsGarbage) {
  std::string bytes;
  for (int n = 0; n < 40; ++n) {
    const std::string encoded = crypto::base64_encode(bytes);
    std::string decoded;
    ASSERT_TRUE(crypto::base64_decode(encoded, decoded));
    EXPECT_EQ(decoded, bytes);
    bytes += static_cast<char>(n * 37);
  }
  std::string out;
  EXPECT_FALSE(crypto::base64_decode("abc", out));
  EXPECT_FALSE(crypto::base64_decode("ab!?", out));
}

TEST(Text, UriEncodingFollowsSigV4Rules) {
  EXPECT_EQ(text::uri_encode("a b/c~d_e.f-g", false), "a%20b%2Fc~d_e.f-g");
  EXPECT_EQ(text::uri_encode("a b/c", true), "a%20b/c");
  EXPECT_EQ(text::uri_encode("\xe1\x88\xb4", false), "%E1%88%B4");
  EXPECT_EQ(text::uri_decode("%E1%88%B4=%zz%4"), "\xe1\x88\xb4=%zz%4");
}

TEST(SqsMd5, MessageAttributeDigestMatchesTheServiceAlgorithm) {
  // Digests as computed by the SQS service algorithm (and by the emulator) for these values.
  sqs::MessageAttributes one{{"a", sqs::MessageAttributeValue::string("x")}};
  EXPECT_EQ(sqs::md5_of_message_attributes(one), "a512aac9938034acb0b3c3d965944bf1");
  // Order of insertion does not matter: names are sorted.
  sqs::MessageAttributes two{{"b", sqs::MessageAttributeValue::number("1")},
                             {"a", sqs::MessageAttributeValue::binary(std::string("\x00\x01", 2))}};
  sqs::MessageAttributes two_again{
      {"a", sqs::MessageAttributeValue::binary(std::string("\x00\x01", 2))},
      {"b", sqs::MessageAttributeValue::number("1")}};
  EXPECT_EQ(sqs::md5_of_message_attributes(two), sqs::md5_of_message_attributes(two_again));
  EXPECT_NE(sqs::md5_of_message_attributes(two), sqs::md5_of_message_attributes(one));
}

// Connection strings in errors: the password never shows, even written carelessly.
TEST(Redact, PasswordsOfUrisAndKeyValueStringsNeverShow) {
  using sluice::common::redact_password;
  using sluice::common::redact_secret;
  EXPECT_EQ(redact_password("mongodb://u:hunter2@h:27017/db?x=1"),
            "mongodb://u:***@h:27017/db?x=1");
  EXPECT_EQ(redact_password("mongodb://u:hun/ter2@h/"), "mongodb://u:***@h/");
  // A URL typed without its scheme still hides its password.
  EXPECT_EQ(redact_password("bob:SECRET@127.0.0.1"), "bob:***@127.0.0.1");
  EXPECT_EQ(redact_password("host=h user=u"), "host=h user=u");
  EXPECT_EQ(redact_password("postgresql://u:p@ss@h/db"), "postgresql://u:***@h/db");
  EXPECT_EQ(redact_password("host=h password=s3cret user=u"), "host=h password=*** user=u");
  EXPECT_EQ(redact_password("host=h password = 'a b\\' c' user=u"),
            "host=h password = '***' user=u");
  EXPECT_EQ(redact_password("mongodb://h/db"), "mongodb://h/db");
  // A token alone as an HTTP URL's userinfo is the secret; a database URL's user is not.
  EXPECT_EQ(redact_password("https://s3cr3tpw@127.0.0.1:1/v1"), "https://***@127.0.0.1:1/v1");
  EXPECT_EQ(redact_password("postgresql://postgres@h/db"), "postgresql://postgres@h/db");
  EXPECT_EQ(
      redact_secret("could not connect to s3cr3tpw@127.0.0.1:1", "http://s3cr3tpw@127.0.0.1:1"),
      "could not connect to ***@127.0.0.1:1");
  EXPECT_EQ(redact_password("mongodb://user:Zq9?SECRET@127.0.0.1:99/db"),
            "mongodb://user:***@127.0.0.1:99/db")
      << "a '?' in the password is not the query";
  EXPECT_EQ(redact_secret("missing \"=\" after \"SECRET\"", "host=h password=Zq9 SECRET"),
            "missing \"=\" after \"***\"")
      << "a piece split at a space";
  // A driver that lowercased a host name holding a piece of the password.
  EXPECT_EQ(redact_secret("Failed to resolve 'mysecretpw@127.0.0.1'",
                          "mongodb://user:pw@MySecretPw@127.0.0.1:1/db"),
            "Failed to resolve '***@127.0.0.1'");
  // A driver that split an unencoded '@' and quoted the rest.
  EXPECT_EQ(redact_secret("Failed to resolve 'ter2secret@127.0.0.1'",
                          "mongodb://u:hun@ter2secret@127.0.0.1:1/"),
            "Failed to resolve '***@127.0.0.1'");
}
