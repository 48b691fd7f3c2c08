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
 * The pixels the AV1 image items of a HEIF file code: the sum of their `ispe` areas, an alpha or depth
 * plane left out only where it is one (the source of an `auxl` reference to a counted AV1 item, no input
 * of a derived image, and no larger than that item). Undefined when the file has no AV1 item or its item
 * boxes cannot be read; Infinity when an AV1 image item that counts declares no size, or one that is
 * associated twice (libheif reads the first association only), or none counts: a file built to hide its
 * size, which libheif still decodes.
 *
 * Best effort, not a proof: libheif decodes the AV1 bitstream at the size its sequence header codes,
 * whatever `ispe` says, and allocates a grid's or an overlay's canvas at the size of its payload (code
 * review, 2026-11-27; docs/api.md "AVIF limit").
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
    const references = referencesOf(bytes, meta);
    const primary = primaryItemOf(bytes, meta);
    const inputs = new Set(references.filter((r) => r.type === 'dimg').flatMap((r) => r.to));
    // Properties, addressed 1-based by the associations of every ipma box (a file may hold several).
    const properties = [...boxesIn(bytes, ipco.body, ipco.end)];
    const sizes = new Map<number, { width: number; height: number }>();
    const associated = new Set<number>();
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
        if (associated.has(id)) return Number.POSITIVE_INFINITY;
        associated.add(id);
        const count = bytes[at]!;
        at += 1;
        for (let i = 0; i < count; i += 1) {
          const index = wideIndices ? bytes.readUInt16BE(at) & 0x7fff : bytes[at]! & 0x7f;
          at += wideIndices ? 2 : 1;
          const property = properties[index - 1];
          // ispe: version and flags, then 32-bit width and height.
          if (property?.type === 'ispe' && !sizes.has(id))
            sizes.set(id, {
              width: bytes.readUInt32BE(property.body + 4),
              height: bytes.readUInt32BE(property.body + 8),
            });
        }
      }
    }
    // An alpha (or depth) plane of a counted AV1 item, no larger than it, is not counted again.
    const planeOf = new Map<number, number>();
    for (const { type, from, to } of references)
      if (type === 'auxl' && from !== primary && !inputs.has(from) && to[0] !== undefined)
        planeOf.set(from, to[0]);
    const counted = [...av1Items].filter((id) => {
      const of = planeOf.get(id);
      if (of === undefined || !av1Items.has(of) || planeOf.has(of)) return true;
      const [plane, image] = [sizes.get(id), sizes.get(of)];
      return !plane || !image || plane.width > image.width || plane.height > image.height;
    });
    let pixels = 0;
    for (const id of counted) {
      const size = sizes.get(id);
      if (!size) return Number.POSITIVE_INFINITY;
      pixels += size.width * size.height;
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

/** The item references (`iref`: version 0, 16-bit item ids; 1, 32-bit), each type, source and targets. */
function referencesOf(bytes: Buffer, meta: Box): { type: string; from: number; to: number[] }[] {
  const iref = childOf(bytes, meta, 'iref', 4);
  if (!iref) return [];
  const idBytes = bytes[iref.body] === 0 ? 2 : 4;
  const id = (at: number) => (idBytes === 2 ? bytes.readUInt16BE(at) : bytes.readUInt32BE(at));
  const references: { type: string; from: number; to: number[] }[] = [];
  for (const reference of boxesIn(bytes, iref.body + 4, iref.end)) {
    const count = bytes.readUInt16BE(reference.body + idBytes);
    const to = Array.from({ length: count }, (_, i) => id(reference.body + idBytes + 2 + i * idBytes));
    references.push({ type: reference.type, from: id(reference.body), to });
  }
  return references;
}

/** The primary item's id (`pitm`), when there is one. */
function primaryItemOf(bytes: Buffer, meta: Box): number | undefined {
  const pitm = childOf(bytes, meta, 'pitm', 4);
  if (!pitm) return undefined;
  return bytes[pitm.body] === 0 ? bytes.readUInt16BE(pitm.body + 4) : bytes.readUInt32BE(pitm.body + 4);
}
