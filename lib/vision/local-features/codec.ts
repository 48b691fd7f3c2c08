/**
 * Compact binary form of `LocalFeatures`, written to the ObjectStore at ingestion and read back at query
 * time, so catalogue keypoints are never recomputed per search.
 *
 * Layout (little-endian), version 1:
 * ```
 * 0   4  magic "GVLF"
 * 4   1  version (1)
 * 5   1  flags: bit 0 = a mirrored set follows the original
 * 6   2  reserved (0)
 * per set (original, then mirrored if flagged):
 *     2  width, 2 height           extraction raster size
 *     4  count                     keypoints
 *     count × 2 × u16              x, y in quarter pixels
 *     count × 32 bytes             descriptors
 * end 4  CRC-32 of everything before it
 * ```
 * 36 bytes per keypoint; 800 keypoints in each orientation ≈ 58 KB per item.
 */
import { crc32 } from 'node:zlib';
import {
  DESCRIPTOR_WORDS,
  featureCount,
  type FeatureSet,
  type LocalFeatures,
} from '#lib/vision/local-features/types.ts';

/** Current format version; bump it (and keep a reader for the old one) on any layout change. */
export const FEATURES_FORMAT_VERSION = 1;
const MAGIC = 0x464c5647; // "GVLF" read as a little-endian u32
const HEADER_BYTES = 8;
const SET_HEADER_BYTES = 8;
const DESCRIPTOR_BYTES = DESCRIPTOR_WORDS * 4;
const CRC_BYTES = 4;
const MAX_COORDINATE = 0xffff / 4;

/** The bytes are not a local-features record this code can read (wrong magic, version, size or checksum). */
export class FeatureFormatError extends Error {
  constructor(message: string) {
    super(`Invalid local-features record: ${message}`);
    this.name = 'FeatureFormatError';
  }
}

function setBytes(set: FeatureSet): number {
  return SET_HEADER_BYTES + featureCount(set) * (4 + DESCRIPTOR_BYTES);
}

/** Serialises features; throws RangeError for coordinates the format cannot hold (> 16383 px). */
export function encodeFeatures(features: LocalFeatures): Buffer {
  const sets = features.mirrored ? [features.original, features.mirrored] : [features.original];
  const total = HEADER_BYTES + sets.reduce((sum, set) => sum + setBytes(set), 0) + CRC_BYTES;
  const out = Buffer.alloc(total);
  out.writeUInt32LE(MAGIC, 0);
  out.writeUInt8(FEATURES_FORMAT_VERSION, 4);
  out.writeUInt8(features.mirrored ? 1 : 0, 5);
  let offset = HEADER_BYTES;
  for (const set of sets) {
    const count = featureCount(set);
    if (set.descriptors.length !== count * DESCRIPTOR_WORDS) {
      throw new RangeError(`${count} keypoints but ${set.descriptors.length / DESCRIPTOR_WORDS} descriptors`);
    }
    out.writeUInt16LE(set.width, offset);
    out.writeUInt16LE(set.height, offset + 2);
    out.writeUInt32LE(count, offset + 4);
    offset += SET_HEADER_BYTES;
    for (const value of set.points) {
      if (!(value >= 0 && value <= MAX_COORDINATE))
        throw new RangeError(`keypoint coordinate ${value} out of range`);
      out.writeUInt16LE(Math.round(value * 4), offset);
      offset += 2;
    }
    const words = set.descriptors;
    Buffer.from(words.buffer, words.byteOffset, words.byteLength).copy(out, offset);
    offset += words.byteLength;
  }
  out.writeUInt32LE(crc32(out.subarray(0, offset)), offset);
  return out;
}

/** Parses bytes written by `encodeFeatures`; throws `FeatureFormatError` on anything else. */
export function decodeFeatures(bytes: Uint8Array): LocalFeatures {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buffer.length < HEADER_BYTES + SET_HEADER_BYTES + CRC_BYTES) throw new FeatureFormatError('too short');
  if (buffer.readUInt32LE(0) !== MAGIC) throw new FeatureFormatError('bad magic');
  const version = buffer.readUInt8(4);
  if (version !== FEATURES_FORMAT_VERSION) {
    throw new FeatureFormatError(`version ${version}, this reader understands ${FEATURES_FORMAT_VERSION}`);
  }
  const body = buffer.length - CRC_BYTES;
  if (crc32(buffer.subarray(0, body)) !== buffer.readUInt32LE(body))
    throw new FeatureFormatError('checksum mismatch');
  const flags = buffer.readUInt8(5);
  if (flags > 1) throw new FeatureFormatError(`unknown flags ${flags}`);
  let offset = HEADER_BYTES;
  const readSet = (): FeatureSet => {
    if (offset + SET_HEADER_BYTES > body) throw new FeatureFormatError('truncated');
    const width = buffer.readUInt16LE(offset);
    const height = buffer.readUInt16LE(offset + 2);
    const count = buffer.readUInt32LE(offset + 4);
    offset += SET_HEADER_BYTES;
    if (offset + count * (4 + DESCRIPTOR_BYTES) > body) throw new FeatureFormatError('truncated');
    const points = new Float32Array(count * 2);
    for (let i = 0; i < points.length; i++, offset += 2) points[i] = buffer.readUInt16LE(offset) / 4;
    // Copy: the source buffer is not necessarily 4-byte aligned, and callers may keep the sets for long.
    const descriptors = new Uint32Array(count * DESCRIPTOR_WORDS);
    buffer.copy(Buffer.from(descriptors.buffer), 0, offset, offset + descriptors.byteLength);
    offset += descriptors.byteLength;
    return { width, height, points, descriptors };
  };
  const original = readSet();
  const features: LocalFeatures = flags & 1 ? { original, mirrored: readSet() } : { original };
  if (offset !== body) throw new FeatureFormatError(`${body - offset} trailing bytes`);
  return features;
}
