/** Test JPEGs with many scans: decode time grows with them (lib/vision/jpeg-scans.ts). */

/** The first scan of `jpeg`: its start-of-scan segment and data, up to the end-of-image marker. */
export function firstScan(jpeg: Buffer): Buffer {
  return jpeg.subarray(jpeg.indexOf(Buffer.from([0xff, 0xda])), jpeg.length - 2);
}

/** A baseline (one-scan) `jpeg` with that scan repeated until the stream holds `scans` of them. */
export function withScans(jpeg: Buffer, scans: number): Buffer {
  const scan = firstScan(jpeg);
  return Buffer.concat([
    jpeg.subarray(0, jpeg.length - 2),
    ...Array<Buffer>(scans - 1).fill(scan),
    jpeg.subarray(-2),
  ]);
}
