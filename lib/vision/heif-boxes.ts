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
 * The pixels the AV1 image items of a HEIF file code: the sum of their `ispe` areas, auxiliary images
 * (alpha or depth planes: the source of an `auxl` reference, never the primary item) left out. Undefined
 * when the file has no AV1 item or its item boxes cannot be read (then what sharp reports is all there is
 * to go by); Infinity when an AV1 image item that counts declares no size, or none counts (a file built to
 * hide its size: libheif still decodes it).
 */
export function av1CodedPixels(bytes: Buffer): number | undefined {
  try {
    const meta = [...boxesIn(bytes, 0, bytes.length)].find((box) => box.type === 'meta');
    if (!meta) return undefined;
    const iinf = childOf(bytes, meta, 'iinf', 4);
    const iprp = childOf(bytes, meta, 'iprp', 4);
    const ipco = iprp && childOf(bytes, iprp, 'ipco');
    if (!iinf || !iprp || !ipco) return undefined;
    const av1Items = av1ItemsOf(bytes, iinf);
    if (av1Items.size === 0) return undefined;
    const auxiliary = auxiliaryItemsOf(bytes, meta);
    const primary = primaryItemOf(bytes, meta);
    if (primary !== undefined) auxiliary.delete(primary);
    // Properties, addressed 1-based by the associations of every ipma box (a file may hold several).
    const properties = [...boxesIn(bytes, ipco.body, ipco.end)];
    const sizes = new Map<number, number>();
    for (const ipma of boxesIn(bytes, iprp.body, iprp.end)) {
      if (ipma.type !== 'ipma') continue;
      const version = bytes[ipma.body]!;
      const wideIndices = (bytes[ipma.body + 3]! & 1) === 1;
      let at = ipma.body + 4;
      const entries = bytes.readUInt32BE(at);
      at += 4;
      for (let entry = 0; entry < entries; entry += 1) {
        const id = version < 1 ? bytes.readUInt16BE(at) : bytes.readUInt32BE(at);
        at += version < 1 ? 2 : 4;
        const count = bytes[at]!;
        at += 1;
        for (let i = 0; i < count; i += 1) {
          const index = wideIndices ? bytes.readUInt16BE(at) & 0x7fff : bytes[at]! & 0x7f;
          at += wideIndices ? 2 : 1;
          const property = properties[index - 1];
          // ispe: version and flags, then 32-bit width and height.
          if (property?.type === 'ispe' && !sizes.has(id))
            sizes.set(id, bytes.readUInt32BE(property.body + 4) * bytes.readUInt32BE(property.body + 8));
        }
      }
    }
    let pixels = 0;
    for (const id of av1Items) {
      if (auxiliary.has(id)) continue;
      const size = sizes.get(id);
      if (size === undefined) return Number.POSITIVE_INFINITY;
      pixels += size;
    }
    return pixels > 0 ? pixels : Number.POSITIVE_INFINITY;
  } catch {
    // A box cut short (a read past the end throws RangeError).
    return undefined;
  }
}

/** The ids of the AV1-coded items (infe version 2: a 16-bit item id, 3: 32-bit; then the item type). */
function av1ItemsOf(bytes: Buffer, iinf: Box): Set<number> {
  const items = new Set<number>();
  const entryCountBytes = bytes[iinf.body] === 0 ? 2 : 4;
  for (const infe of boxesIn(bytes, iinf.body + 4 + entryCountBytes, iinf.end)) {
    const version = bytes[infe.body]!;
    if (infe.type !== 'infe' || version < 2) continue;
    const idBytes = version === 2 ? 2 : 4;
    const id = idBytes === 2 ? bytes.readUInt16BE(infe.body + 4) : bytes.readUInt32BE(infe.body + 4);
    const typeAt = infe.body + 4 + idBytes + 2;
    if (bytes.toString('latin1', typeAt, typeAt + 4) === 'av01') items.add(id);
  }
  return items;
}

/** The items that are an auxiliary image of another (the source of an `auxl` item reference). */
function auxiliaryItemsOf(bytes: Buffer, meta: Box): Set<number> {
  const items = new Set<number>();
  const iref = childOf(bytes, meta, 'iref', 4);
  if (!iref) return items;
  const wideIds = bytes[iref.body] !== 0;
  for (const reference of boxesIn(bytes, iref.body + 4, iref.end)) {
    if (reference.type !== 'auxl') continue;
    items.add(wideIds ? bytes.readUInt32BE(reference.body) : bytes.readUInt16BE(reference.body));
  }
  return items;
}

/** The primary item's id (`pitm`), when there is one. */
function primaryItemOf(bytes: Buffer, meta: Box): number | undefined {
  const pitm = childOf(bytes, meta, 'pitm', 4);
  if (!pitm) return undefined;
  return bytes[pitm.body] === 0 ? bytes.readUInt16BE(pitm.body + 4) : bytes.readUInt32BE(pitm.body + 4);
}
