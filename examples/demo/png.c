/*
 * png.c -- a minimal PNG writer: 8-bit RGB, no filtering, and a zlib stream
 * of stored (uncompressed) deflate blocks. The files are larger than a
 * compressing encoder's, but the code is short and needs no zlib; every
 * viewer reads them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

/* A deflate stored block carries at most 65535 bytes. */
enum { kStoredBlock = 65535 };

static uint32_t crc32_update(uint32_t crc, const unsigned char *data, size_t length) {
  static uint32_t table[256];
  static int table_ready = 0;
  if (!table_ready) {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[n] = c;
    }
    table_ready = 1;
  }
  crc = ~crc;
  for (size_t i = 0; i < length; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* A chunk is length, type, data, and the CRC of type and data. */
static int write_chunk(FILE *f, const char type[4], const unsigned char *data, size_t length) {
  unsigned char head[8];
  put_be32(head, (uint32_t)length);
  memcpy(head + 4, type, 4);
  uint32_t crc = crc32_update(0, head + 4, 4);
  crc = crc32_update(crc, data, length);
  unsigned char tail[4];
  put_be32(tail, crc);
  return fwrite(head, 1, 8, f) == 8 && fwrite(data, 1, length, f) == length &&
         fwrite(tail, 1, 4, f) == 4;
}

/* Writes an 8-bit RGB image; 0 on an I/O error. */
static int write_png(const char *path, int width, int height, const unsigned char *rgb) {
  /* Each scanline is a filter-type byte (0: none) and the pixels. */
  const size_t line = 1 + 3 * (size_t)width;
  const size_t raw_size = line * (size_t)height;
  const size_t blocks = raw_size / kStoredBlock + 1;
  /* zlib header, 5 bytes per stored block, Adler-32. */
  const size_t zlib_size = 2 + raw_size + 5 * blocks + 4;
  unsigned char *raw = malloc(raw_size);
  unsigned char *z = malloc(zlib_size);
  int ok = raw && z;
  if (ok) {
    for (int y = 0; y < height; ++y) {
      raw[y * line] = 0;
      memcpy(raw + y * line + 1, rgb + (size_t)y * 3 * (size_t)width, 3 * (size_t)width);
    }
    size_t at = 0;
    z[at++] = 0x78;  /* deflate, 32 KiB window */
    z[at++] = 0x01;  /* no preset dictionary; makes the header a multiple of 31 */
    uint32_t a = 1, b = 0;
    for (size_t done = 0, i = 0; i < blocks; ++i) {
      size_t n = raw_size - done < kStoredBlock ? raw_size - done : kStoredBlock;
      z[at++] = i + 1 == blocks ? 1 : 0; /* BFINAL on the last, BTYPE 00 */
      z[at++] = (unsigned char)n, z[at++] = (unsigned char)(n >> 8);
      z[at++] = (unsigned char)~n, z[at++] = (unsigned char)(~n >> 8);
      memcpy(z + at, raw + done, n);
      for (size_t k = 0; k < n; ++k) {
        a = (a + raw[done + k]) % 65521u;
        b = (b + a) % 65521u;
      }
      at += n, done += n;
    }
    put_be32(z + at, (b << 16) | a);
  }

  unsigned char header[13];
  put_be32(header, (uint32_t)width);
  put_be32(header + 4, (uint32_t)height);
  header[8] = 8;   /* bits per channel */
  header[9] = 2;   /* colour type: RGB */
  header[10] = 0, header[11] = 0, header[12] = 0; /* deflate, adaptive filters, no interlace */
  static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

  FILE *f = ok ? fopen(path, "wb") : NULL;
  ok = f != NULL;
  ok = ok && fwrite(signature, 1, 8, f) == 8;
  ok = ok && write_chunk(f, "IHDR", header, sizeof header);
  ok = ok && write_chunk(f, "IDAT", z, zlib_size);
  ok = ok && write_chunk(f, "IEND", NULL, 0);
  if (f && fclose(f) != 0) ok = 0;
  free(raw);
  free(z);
  return ok;
}

static unsigned char to_byte(float v) {
  return (unsigned char)(v <= 0.0f ? 0 : v >= 1.0f ? 255 : (int)(v * 255.0f + 0.5f));
}

int demo_write_tiles_png(const char *path, const float *const *tiles, int count, int size,
                         int zoom) {
  /* A single tile is written bare: its pixels exactly. */
  const int gap = count > 1 ? 2 * zoom : 0;
  const int side = size * zoom;
  const int width = count * side + (count + 1) * gap, height = side + 2 * gap;
  unsigned char *rgb = malloc(3 * (size_t)width * (size_t)height);
  if (!rgb) return 0;
  memset(rgb, 40, 3 * (size_t)width * (size_t)height); /* dark grey frame */
  for (int t = 0; t < count; ++t) {
    for (int y = 0; y < side; ++y) {
      for (int x = 0; x < side; ++x) {
        /* Nearest neighbour: each pixel stays a crisp square, as the
         * network saw it. */
        const float *src = tiles[t] + 3 * ((size_t)(y / zoom) * size + (size_t)(x / zoom));
        unsigned char *dst =
            rgb + 3 * ((size_t)(gap + y) * width + (size_t)(gap + t * (side + gap) + x));
        for (int c = 0; c < 3; ++c) dst[c] = to_byte(src[c]);
      }
    }
  }
  int ok = write_png(path, width, height, rgb);
  free(rgb);
  return ok;
}
