// Minimal msgpack encoder for the event batches described in spec_actor.h.
// Only the types the schema uses: arrays, maps, str, bin, ints, doubles.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sa {

class MsgpackWriter {
public:
    void clear() { buf_.clear(); }
    const uint8_t * data() const { return buf_.data(); }
    size_t size() const { return buf_.size(); }

    void array(uint32_t n) {
        if (n < 16) { put(0x90 | n); }
        else if (n < 65536) { put(0xdc); be16(n); }
        else { put(0xdd); be32(n); }
    }

    void map(uint32_t n) {
        if (n < 16) { put(0x80 | n); }
        else if (n < 65536) { put(0xde); be16(n); }
        else { put(0xdf); be32(n); }
    }

    void integer(int64_t v) {
        if (v >= 0) {
            if (v < 128) { put((uint8_t) v); }
            else if (v <= 0xffffffffLL) { put(0xce); be32((uint32_t) v); }
            else { put(0xcf); be64((uint64_t) v); }
        } else if (v >= -32) {
            put((uint8_t) (int8_t) v);
        } else {
            put(0xd3); be64((uint64_t) v);
        }
    }

    void real(double v) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        put(0xcb); be64(bits);
    }

    void str(const char * s, size_t n) {
        if (n < 32) { put(0xa0 | (uint8_t) n); }
        else if (n < 256) { put(0xd9); put((uint8_t) n); }
        else if (n < 65536) { put(0xda); be16((uint32_t) n); }
        else { put(0xdb); be32((uint32_t) n); }
        raw(s, n);
    }
    void str(const std::string & s) { str(s.data(), s.size()); }
    void key(const char * s) { str(s, std::strlen(s)); }

    void append(const MsgpackWriter & other) { buf_.insert(buf_.end(), other.buf_.begin(), other.buf_.end()); }

    void bin(const char * s, size_t n) {
        if (n < 256) { put(0xc4); put((uint8_t) n); }
        else if (n < 65536) { put(0xc5); be16((uint32_t) n); }
        else { put(0xc6); be32((uint32_t) n); }
        raw(s, n);
    }

private:
    std::vector<uint8_t> buf_;

    void put(uint8_t b) { buf_.push_back(b); }
    void raw(const char * s, size_t n) { buf_.insert(buf_.end(), s, s + n); }
    void be16(uint32_t v) { put((uint8_t) (v >> 8)); put((uint8_t) v); }
    void be32(uint32_t v) { for (int s = 24; s >= 0; s -= 8) put((uint8_t) (v >> s)); }
    void be64(uint64_t v) { for (int s = 56; s >= 0; s -= 8) put((uint8_t) (v >> s)); }
};

}  // namespace sa
