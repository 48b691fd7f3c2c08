/**
 * What an AVIF's decode produces, read from its ISO BMFF boxes (ISO/IEC 23008-12, HEIF): the pixels of
 * every AV1-coded image item, each at its coded size (`ispe`). sharp reports the image as libheif
 * presents it, after the crop box (`clap`) and at the size a grid declares for its output, while the
 * decoder decodes every coded frame in full: an 883-byte AVIF shown as 64 × 64 decoded an 8200 × 4000
 * frame (675 MB of memory), and so did a grid of two tiles declared 64 × 64 (code review, 2026-11-27).
 */

interface Box {
  type: string;
  /** Offset of the box's payload (after its size and type). */
  body: number;
  /** Offset just past the box. */
  end: number;
}

/** The boxes laid one after another in bytes [start, end); stops at one that does not fit. */
function* boxesIn(bytes: Buffer, start: number, end: number): Generator<Box> {
  let at = start;
  while (at + 8 <= end) {
    let size = bytes.readUInt32BE(at);
    const type = bytes.toString('latin1', at + 4, at + 8);
    let header = 8;
    if (size === 1) {
      if (at + 16 > end) return;
      size = Number(bytes.readBigUInt64BE(at + 8));
      header = 16;
    } else if (size === 0) size = end - at;
    if (size < header || at + size > end) return;
    yield { type, body: at + header, end: at + size };
    at += size;
  }
}

/** The first child of `box` of this type; `skip` bytes of the payload (a full box's version and flags). */
function childOf(bytes: Buffer, box: Box, type: string, skip = 0): Box | undefined {
  for (const child of boxesIn(bytes, box.body + skip, box.end)) if (child.type === type) return child;
  return undefined;
}

/**
 * The pixels the AV1 image items of a HEIF file code (the sum of their `ispe` areas; auxiliary images
 * such as alpha or depth planes left out), or undefined when the file has no AV1 item or its item boxes
 * cannot be read (then what sharp reports is all there is to go by).
 */
export function av1CodedPixels(bytes: Buffer): number | undefined {
  try {
    const meta = [...boxesIn(bytes, 0, bytes.length)].find((box) => box.type === 'meta');
    if (!meta) return undefined;
    const iinf = childOf(bytes, meta, 'iinf', 4);
    const iprp = childOf(bytes, meta, 'iprp', 4);
    const ipco = iprp && childOf(bytes, iprp, 'ipco');
    const ipma = iprp && childOf(bytes, iprp, 'ipma');
    if (!iinf || !ipco || !ipma) return undefined;
    // Item infos (infe version 2: a 16-bit item id, 3: 32-bit), then the item type.
    const av1Items = new Set<number>();
    const entryCountBytes = bytes[iinf.body] === 0 ? 2 : 4;
    for (const infe of boxesIn(bytes, iinf.body + 4 + entryCountBytes, iinf.end)) {
      const version = bytes[infe.body]!;
      if (infe.type !== 'infe' || version < 2) continue;
      const idBytes = version === 2 ? 2 : 4;
      const id = idBytes === 2 ? bytes.readUInt16BE(infe.body + 4) : bytes.readUInt32BE(infe.body + 4);
      const typeAt = infe.body + 4 + idBytes + 2;
      if (bytes.toString('latin1', typeAt, typeAt + 4) === 'av01') av1Items.add(id);
    }
    if (av1Items.size === 0) return undefined;
    // Properties, addressed 1-based by the associations.
    const properties = [...boxesIn(bytes, ipco.body, ipco.end)];
    const version = bytes[ipma.body]!;
    const wideIndices = (bytes[ipma.body + 3]! & 1) === 1;
    let at = ipma.body + 4;
    const entries = bytes.readUInt32BE(at);
    at += 4;
    let pixels = 0;
    for (let entry = 0; entry < entries; entry += 1) {
      const id = version < 1 ? bytes.readUInt16BE(at) : bytes.readUInt32BE(at);
      at += version < 1 ? 2 : 4;
      const count = bytes[at]!;
      at += 1;
      const associated: Box[] = [];
      for (let i = 0; i < count; i += 1) {
        const index = wideIndices ? bytes.readUInt16BE(at) & 0x7fff : bytes[at]! & 0x7f;
        at += wideIndices ? 2 : 1;
        const property = properties[index - 1];
        if (property) associated.push(property);
      }
      if (!av1Items.has(id) || associated.some((property) => property.type === 'auxC')) continue;
      for (const property of associated) {
        // ispe: version and flags, then 32-bit width and height.
        if (property.type === 'ispe')
          pixels += bytes.readUInt32BE(property.body + 4) * bytes.readUInt32BE(property.body + 8);
      }
    }
    return pixels;
  } catch {
    // A box cut short (a read past the end throws RangeError).
    return undefined;
  }
}
