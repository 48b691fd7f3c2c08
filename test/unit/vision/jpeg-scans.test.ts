import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { jpegScanCount } from '#lib/vision/jpeg-scans.ts';
import { firstScan, withScans } from '#test/support/jpeg-scans.ts';

const photo = () =>
  sharp({ create: { width: 64, height: 48, channels: 3, background: { r: 200, g: 40, b: 90 } } });

/** `jpeg` with `segment` inserted right after its start-of-image marker. */
const withSegment = (jpeg: Buffer, segment: Buffer) =>
  Buffer.concat([jpeg.subarray(0, 2), segment, jpeg.subarray(2)]);

describe('jpegScanCount', () => {
  it('counts one scan in a baseline JPEG and the encoder script of a progressive one', async () => {
    const baseline = await photo().jpeg().toBuffer();
    const progressive = await photo().jpeg({ progressive: true }).toBuffer();
    expect(jpegScanCount(baseline)).toBe(1);
    // libjpeg's progressive script for three components: 10 scans
    expect(jpegScanCount(progressive)).toBe(10);
  });

  it('counts scans added to the stream, and stops past the limit it is given', async () => {
    const jpeg = await photo().jpeg().toBuffer();
    const many = withScans(jpeg, 251);
    expect(jpegScanCount(many)).toBe(251);
    expect(jpegScanCount(many, 100)).toBe(101);
  });

  it('does not read marker bytes inside a metadata segment or stuffed bytes in the scan data', async () => {
    const jpeg = await photo().jpeg().toBuffer();
    // An APP2 segment (where ICC profiles go) full of start-of-scan byte pairs
    const payload = Buffer.concat(Array(500).fill(Buffer.from([0xff, 0xda, 0x00, 0x08])));
    const length = Buffer.alloc(2);
    length.writeUInt16BE(payload.length + 2);
    const app2 = Buffer.concat([Buffer.from([0xff, 0xe2]), length, payload]);
    expect(jpegScanCount(withSegment(jpeg, app2))).toBe(1);
    // A noisy photo's entropy-coded data holds stuffed 0xFF00 pairs and still counts as one scan
    const noise = Buffer.from(Array.from({ length: 64 * 48 * 3 }, (_, i) => (i * 7919) % 251));
    const noisy = await sharp(noise, { raw: { width: 64, height: 48, channels: 3 } })
      .jpeg({ quality: 100 })
      .toBuffer();
    expect(firstScan(noisy).includes(Buffer.from([0xff, 0x00]))).toBe(true);
    expect(jpegScanCount(noisy)).toBe(1);
  });

  it('reads anything that is not a JPEG, or is cut short, without throwing', async () => {
    const png = await photo().png().toBuffer();
    const jpeg = await photo().jpeg({ progressive: true }).toBuffer();
    expect(jpegScanCount(png)).toBe(0);
    expect(jpegScanCount(Buffer.alloc(0))).toBe(0);
    expect(jpegScanCount(Buffer.from([0xff, 0xd8, 0xff]))).toBe(0);
    expect(jpegScanCount(jpeg.subarray(0, Math.floor(jpeg.length / 2)))).toBeGreaterThan(0);
    expect(jpegScanCount(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x00, 0x12, 0xff]))).toBe(0);
  });
});
