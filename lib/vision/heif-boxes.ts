/**
 * What an AVIF's decode produces, read from its ISO BMFF boxes (ISO/IEC 23008-12, HEIF): the pixels of
 * every AV1-coded image item, each at the larger of its declared size (`ispe`) and the frame size its AV1
 * sequence header codes (AV1 spec §5.5, read from the `av1C` configOBUs and from the item's data):
 * libheif hands both to the decoder, which decodes at the bitstream's size whatever `ispe` says. sharp
 * reports the image as libheif presents it, after the crop box (`clap`) and at the size a grid declares
 * for its output, while the decoder decodes every coded frame in full: an 883-byte AVIF shown as 64 × 64
 * decoded an 8200 × 4000 frame (675 MB of memory), and so did a grid of two tiles declared 64 × 64 (code
 * review, 2026-11-27).
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
 * The pixels the AV1 image items of a HEIF file code: the sum of their coded areas (below), an alpha or
 * depth plane left out only where the image it belongs to, counted, bounds it: an AV1 plane no larger
 * than its AV1 image, or a grid plane (with its tiles) no larger than its grid image (planesLeftOut).
 * Undefined when the file has no AV1 item or its item boxes cannot be read; Infinity when an AV1 image
 * item that counts declares no size, or one that is associated twice (libheif reads the first association
 * only), or none counts: a file built to hide its size, which libheif still decodes.
 *
 * Each counted item is counted at max(`ispe` area, the largest max_frame_width × max_frame_height of the
 * sequence headers in its `av1C` configOBUs and anywhere in its data, `iloc`); an item with no sequence
 * header in either is Infinity (its size is hidden). The canvases of grids and overlays (`grid`, `iovl`
 * items: libheif allocates one at the size of its payload, whatever `ispe` says) count too: the result
 * is the larger of the AV1 items' sum and the canvases' (below). Undefined too for a grid or an overlay
 * whose payload cannot be read, for an AV1 item whose data is built from other items (`iloc`
 * construction method 2: libheif does not build such data, so it is no legit AVIF) and for items whose
 * data add up to more than the file, items naming the same extents read once (code review, 2026-11-27;
 * docs/api.md "AVIF limit").
 */
export function av1CodedPixels(bytes: Buffer): number | undefined {
  try {
    const meta = [...boxesIn(bytes, 0, bytes.length)].find((box) => box.type === 'meta');
    if (!meta) return undefined;
    const iinf = childOf(bytes, meta, 'iinf', 4);
    const iprp = childOf(bytes, meta, 'iprp', 4);
    const ipco = iprp && childOf(bytes, iprp, 'ipco');
    if (!iinf || !iprp || !ipco) return undefined;
    const types = itemTypesOf(bytes, iinf);
    const av1Items = new Set([...types].filter(([, type]) => type === 'av01').map(([id]) => id));
    if (av1Items.size === 0) return undefined;
    const references = referencesOf(bytes, meta);
    const primary = primaryItemOf(bytes, meta);
    // Properties, addressed 1-based by the associations of every ipma box (a file may hold several).
    const properties = [...boxesIn(bytes, ipco.body, ipco.end)];
    const sizes = new Map<number, { width: number; height: number }>();
    const configs = new Map<number, Box>();
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
          if (property?.type === 'av1C' && !configs.has(id)) configs.set(id, property);
        }
      }
    }
    // The pixels the decoder decodes for an AV1 item: its ispe area, or its bitstream's, the larger.
    const locations = locationsOf(bytes, meta);
    const budget = { bytes: bytes.length };
    // Each av1C read once, however many items share it: 250 items sharing one of 4 MB of padding OBUs
    // took 7 s of the event loop to read (fuzzing, 2026-11-28).
    // Kept as their largest frame, not their frames: each item sharing them read that many frames again
    // (256 items sharing 100,000 sequence headers took 3 s of the event loop, code review 2026-11-28).
    const configFrames = new Map<Box, number | undefined>();
    const framesOf = (config: Box) => {
      // av1C: marker, version, profile, level… (4 bytes), then the configOBUs.
      const largest = configFrames.has(config)
        ? configFrames.get(config)
        : largestArea(sequenceHeaderSizes(bytes.subarray(config.body + 4, config.end)));
      configFrames.set(config, largest);
      return largest;
    };
    // Items whose data lie in the same extents read once, and charged to the budget once: avifenc stores
    // identical tiles once (a flat 4096 × 4096 grid with alpha named 1,680 bytes of data in a 1,295-byte
    // file). Extents that only overlap are still charged each time.
    const dataFrames = new Map<string, number | undefined>();
    const framesOfData = (location: Location | undefined) => {
      const key = JSON.stringify(location ?? null);
      const largest = dataFrames.has(key)
        ? dataFrames.get(key)
        : largestArea(sequenceHeaderSizes(itemData(bytes, meta, location, budget)));
      dataFrames.set(key, largest);
      return largest;
    };
    const coded = new Map<number, number>();
    for (const id of av1Items) {
      const config = configs.get(id);
      const frames = [config ? framesOf(config) : undefined, framesOfData(locations.get(id))].filter(
        (area) => area !== undefined,
      );
      const size = sizes.get(id);
      coded.set(
        id,
        !size || frames.length === 0
          ? Number.POSITIVE_INFINITY
          : Math.max(size.width * size.height, ...frames),
      );
    }
    const canvases = canvasesOf(types, (id) => itemData(bytes, meta, locations.get(id), budget), sizes);
    const leftOut = planesLeftOut({ types, references, primary, sizes, coded, canvases });
    const decodes = decodesOf(references);
    let pixels = 0;
    for (const id of av1Items) if (!leftOut.has(id)) pixels += coded.get(id)! * decodes(id);
    // A grid's or an overlay's canvas is not added to its tiles: libheif decodes them a few at a time (a
    // thread each) and pastes each into the canvas, so the canvas is the memory and the tiles the work,
    // and with both within the limit a grid costs about what one AV1 image as large does (its decoded
    // frame, and the image handed on).
    let canvasPixels = 0;
    for (const [id, canvas] of canvases) if (!leftOut.has(id)) canvasPixels += canvas.area * decodes(id);
    return pixels > 0 ? Math.max(pixels, canvasPixels) : Number.POSITIVE_INFINITY;
  } catch {
    // A box cut short (a read past the end throws RangeError).
    return undefined;
  }
}

/** Each item's type, by id (infe version 2: a 16-bit item id, 3: 32-bit; then the item type). */
function itemTypesOf(bytes: Buffer, iinf: Box): Map<number, string> {
  const items = new Map<number, string>();
  const entryCountBytes = bytes[iinf.body] === 0 ? 2 : 4;
  for (const infe of boxesIn(bytes, iinf.body + 4 + entryCountBytes, iinf.end)) {
    const version = bytes[infe.body]!;
    if (infe.type !== 'infe' || version < 2) continue;
    const idBytes = version === 2 ? 2 : 4;
    const id = idBytes === 2 ? bytes.readUInt16BE(infe.body + 4) : bytes.readUInt32BE(infe.body + 4);
    const typeAt = infe.body + 4 + idBytes + 2;
    if (!items.has(id)) items.set(id, bytes.toString('latin1', typeAt, typeAt + 4));
  }
  return items;
}

/**
 * The largest area among `frames`, undefined when there is none. (A loop: 200,000 frames spread into
 * Math.max overflow the stack.)
 */
function largestArea(frames: Size[]): number | undefined {
  let largest: number | undefined;
  for (const { width, height } of frames) largest = Math.max(largest ?? 0, width * height);
  return largest;
}

/** A width and a height, in pixels. */
interface Size {
  width: number;
  height: number;
}

/** A grid's or an overlay's canvas: the size its payload declares, and the area counted for it. */
interface Canvas extends Size {
  /** The payload's area or the item's ispe area, the larger. */
  area: number;
}

/** The canvas of every grid and overlay item, by id; `payloadOf` reads an item's data. */
function canvasesOf(
  types: Map<number, string>,
  payloadOf: (id: number) => Buffer,
  sizes: Map<number, Size>,
): Map<number, Canvas> {
  const canvases = new Map<number, Canvas>();
  for (const [id, type] of types) {
    if (type !== 'grid' && type !== 'iovl') continue;
    const canvas = canvasOf(payloadOf(id), type);
    const size = sizes.get(id);
    const area = Math.max(canvas.width * canvas.height, size ? size.width * size.height : 0);
    canvases.set(id, { ...canvas, area });
  }
  return canvases;
}

/** What planesLeftOut reads of a file's items. */
interface Items {
  types: Map<number, string>;
  references: Reference[];
  primary: number | undefined;
  /** Each item's ispe. */
  sizes: Map<number, Size>;
  /** Each AV1 item's coded pixels (av1CodedPixels). */
  coded: Map<number, number>;
  canvases: Map<number, Canvas>;
}

/** The references of one type, as lists of targets by source, and sources by target (each read once). */
function linksOf(references: Reference[], type: string) {
  const targetsOf = new Map<number, number[]>();
  const sourcesOf = new Map<number, Set<number>>();
  for (const { from, to } of references.filter((reference) => reference.type === type)) {
    const targets = targetsOf.get(from) ?? [];
    targetsOf.set(from, targets);
    for (const target of to) {
      targets.push(target);
      sourcesOf.set(target, (sourcesOf.get(target) ?? new Set()).add(from));
    }
  }
  return { targetsOf, sourcesOf };
}

/** An `auxl` or a `dimg` reference's targets by source, and sources by target. */
type Links = ReturnType<typeof linksOf>;

/**
 * The alpha (or depth) planes not counted, and the tiles that only they decode. A plane is the source of
 * `auxl` references to one image (libheif refuses a reference to several), itself not the primary item
 * nor the input of a derived image, and the image is no plane itself. libheif decodes an image's alpha
 * with it, one plane of one channel, so the plane is left out where the image, counted, bounds it: an
 * AV1 plane of an AV1 image no larger than it by ispe and by coded area, or a grid plane of a grid image
 * (avifenc's alpha of a grid) that fits it (gridPlaneTiles).
 */
function planesLeftOut(items: Items): Set<number> {
  const { types, references, primary } = items;
  const auxiliary = linksOf(references, 'auxl');
  const derived = linksOf(references, 'dimg');
  // The pixels a grid's tiles code (each as often as named), when all are AV1 items; once per grid, for
  // many planes may name one grid of many tiles.
  const tilePixels = new Map<number, number | undefined>();
  const tilePixelsOf = (grid: number) => {
    if (tilePixels.has(grid)) return tilePixels.get(grid);
    const tiles = derived.targetsOf.get(grid) ?? [];
    const av1 = tiles.length > 0 && tiles.every((tile) => types.get(tile) === 'av01');
    const pixels = av1 ? tiles.reduce((sum, tile) => sum + items.coded.get(tile)!, 0) : undefined;
    tilePixels.set(grid, pixels);
    return pixels;
  };
  const leftOut = new Set<number>();
  for (const [plane, images] of auxiliary.targetsOf) {
    const image = images[0]!;
    if (images.length !== 1 || plane === primary || derived.sourcesOf.has(plane)) continue;
    if (auxiliary.targetsOf.has(image)) continue;
    const [planeType, imageType] = [types.get(plane), types.get(image)];
    if (planeType === 'av01' && imageType === 'av01' && av1PlaneFits(plane, image, items)) leftOut.add(plane);
    if (planeType === 'grid' && imageType === 'grid') {
      const tiles = gridPlaneTiles(plane, image, items, { auxiliary, derived, tilePixelsOf });
      for (const id of tiles ? [plane, ...tiles] : []) leftOut.add(id);
    }
  }
  return leftOut;
}

/**
 * The tiles of a grid plane that fits its grid image, left out with it; undefined when it does not fit.
 * It fits where its canvas is no larger than the image's (canvasFits) and its tiles code no more pixels
 * than the image's, each an AV1 item that only it names, not the primary item and in no `auxl`
 * reference: else a plane with a small canvas could hide large tiles, or tiles another image decodes.
 */
function gridPlaneTiles(
  plane: number,
  image: number,
  { primary, canvases }: Items,
  links: { auxiliary: Links; derived: Links; tilePixelsOf: (grid: number) => number | undefined },
): number[] | undefined {
  const { auxiliary, derived, tilePixelsOf } = links;
  const tiles = derived.targetsOf.get(plane) ?? [];
  const ownTile = (tile: number) =>
    tile !== primary &&
    derived.sourcesOf.get(tile)!.size === 1 &&
    !auxiliary.targetsOf.has(tile) &&
    !auxiliary.sourcesOf.has(tile);
  const [pixels, imagePixels] = [tilePixelsOf(plane), tilePixelsOf(image)];
  const fits =
    tiles.every(ownTile) &&
    pixels !== undefined &&
    imagePixels !== undefined &&
    pixels <= imagePixels &&
    canvasFits(canvases.get(plane)!, canvases.get(image)!);
  return fits ? tiles : undefined;
}

/** Whether an AV1 plane is no larger than its AV1 image, by ispe and by coded area. */
function av1PlaneFits(plane: number, image: number, { sizes, coded }: Items): boolean {
  const [planeSize, imageSize] = [sizes.get(plane), sizes.get(image)];
  return (
    planeSize !== undefined &&
    imageSize !== undefined &&
    planeSize.width <= imageSize.width &&
    planeSize.height <= imageSize.height &&
    coded.get(plane)! <= coded.get(image)!
  );
}

/** Whether a plane's canvas is no wider, no higher and of no larger area than its image's. */
function canvasFits(canvas: Canvas, imageCanvas: Canvas): boolean {
  return (
    canvas.width <= imageCanvas.width &&
    canvas.height <= imageCanvas.height &&
    canvas.area <= imageCanvas.area
  );
}

/**
 * The canvas a grid's or an overlay's payload declares (ISO/IEC 23008-12 ImageGrid, ImageOverlay):
 * version and flags, then rows and columns less one (a byte each) for a grid, a fill colour (4 × 16 bits)
 * for an overlay; then output_width and output_height, 32 bits each when flags & 1, else 16. libheif
 * allocates the canvas at this size whatever the item's ispe says. A payload cut short throws RangeError.
 */
function canvasOf(payload: Buffer, type: 'grid' | 'iovl'): { width: number; height: number } {
  const at = type === 'grid' ? 4 : 10;
  if ((payload.readUInt8(1) & 1) === 0)
    return { width: payload.readUInt16BE(at), height: payload.readUInt16BE(at + 2) };
  return { width: payload.readUInt32BE(at), height: payload.readUInt32BE(at + 4) };
}

/** An item reference: its type, source and targets. */
interface Reference {
  type: string;
  from: number;
  to: number[];
}

/** The item references (`iref`: version 0, 16-bit item ids; 1, 32-bit). */
function referencesOf(bytes: Buffer, meta: Box): Reference[] {
  const iref = childOf(bytes, meta, 'iref', 4);
  if (!iref) return [];
  const idBytes = bytes[iref.body] === 0 ? 2 : 4;
  const id = (at: number) => (idBytes === 2 ? bytes.readUInt16BE(at) : bytes.readUInt32BE(at));
  const references: Reference[] = [];
  for (const reference of boxesIn(bytes, iref.body + 4, iref.end)) {
    const count = bytes.readUInt16BE(reference.body + idBytes);
    // Ids past the box are no references of it: read, a file of many small boxes each counting 65,535
    // made billions of reads (libheif refuses such a box too).
    if (reference.body + idBytes + 2 + count * idBytes > reference.end)
      throw new RangeError(`a ${reference.type} reference runs past its box`);
    const to = Array.from({ length: count }, (_, i) => id(reference.body + idBytes + 2 + i * idBytes));
    references.push({ type: reference.type, from: id(reference.body), to });
  }
  return references;
}

/**
 * How many times libheif decodes each item: a grid or an overlay decodes an input once per reference to
 * it (a grid may name one tile in all of its cells), each time it is decoded itself; every item at least
 * once (as if decoded alone). A cycle of references throws RangeError (libheif refuses it too).
 */
function decodesOf(references: Reference[]): (id: number) => number {
  const usersOf = new Map<number, number[]>();
  for (const { type, from, to } of references)
    if (type === 'dimg')
      for (const input of to) {
        const users = usersOf.get(input) ?? [];
        users.push(from);
        usersOf.set(input, users);
      }
  const known = new Map<number, number>();
  const open = new Set<number>();
  const decodes = (id: number): number => {
    const count = known.get(id);
    if (count !== undefined) return count;
    if (open.has(id)) throw new RangeError(`a reference cycle through item ${id}`);
    open.add(id);
    const uses = (usersOf.get(id) ?? []).reduce((sum, user) => sum + decodes(user), 0);
    open.delete(id);
    known.set(id, Math.max(1, uses));
    return Math.max(1, uses);
  };
  return decodes;
}

/** The primary item's id (`pitm`), when there is one. */
function primaryItemOf(bytes: Buffer, meta: Box): number | undefined {
  const pitm = childOf(bytes, meta, 'pitm', 4);
  if (!pitm) return undefined;
  return bytes[pitm.body] === 0 ? bytes.readUInt16BE(pitm.body + 4) : bytes.readUInt32BE(pitm.body + 4);
}

/**
 * Where an item's data lies (`iloc`): construction method (0 file offsets, 1 `idat`, 2 other items) and
 * extents.
 */
interface Location {
  method: number;
  extents: { offset: number; length: number }[];
}

/** The item locations (`iloc` versions 0, 1 and 2), by item id. */
function locationsOf(bytes: Buffer, meta: Box): Map<number, Location> {
  const locations = new Map<number, Location>();
  const iloc = childOf(bytes, meta, 'iloc', 4);
  if (!iloc) return locations;
  const version = bytes[iloc.body]!;
  let at = iloc.body + 4;
  const [offsetSize, lengthSize] = [bytes[at]! >> 4, bytes[at]! & 15];
  const [baseOffsetSize, indexSize] = [bytes[at + 1]! >> 4, version >= 1 ? bytes[at + 1]! & 15 : 0];
  at += 2;
  // An unsigned integer of 0, 2, 4 or 8 bytes (a field of another size is no iloc to read).
  const uint = (size: number) => {
    if (size !== 0 && size !== 2 && size !== 4 && size !== 8) throw new RangeError(`${size}-byte field`);
    const value =
      size === 0 ? 0 : size === 8 ? Number(bytes.readBigUInt64BE(at)) : bytes.readUIntBE(at, size);
    at += size;
    return value;
  };
  const count = uint(version < 2 ? 2 : 4);
  for (let item = 0; item < count; item += 1) {
    const id = uint(version < 2 ? 2 : 4);
    const method = version >= 1 ? bytes.readUInt16BE(at) & 15 : 0;
    if (version >= 1) at += 2;
    at += 2; // data_reference_index (libheif reads this file whatever it says)
    const base = uint(baseOffsetSize);
    const extentCount = bytes.readUInt16BE(at);
    at += 2;
    const extents: { offset: number; length: number }[] = [];
    for (let extent = 0; extent < extentCount; extent += 1) {
      if (indexSize > 0) uint(indexSize);
      const offset = base + uint(offsetSize);
      extents.push({ offset, length: uint(lengthSize) });
    }
    if (!locations.has(id)) locations.set(id, { method, extents });
  }
  return locations;
}

/**
 * An item's data, all of it, its extents one after another: from the file (construction method 0) or
 * from the `idat` box (1), whatever the data reference (libheif reads this file for any: a reference to
 * another file hid the data here while the decoder read it). All of it, for a sequence header can follow
 * padding or a frame of any size, and the decoder decodes every frame of the data (libaom walks all of
 * it). Data built from other items (2) throws RangeError: libheif refuses it ("not implemented",
 * Box_iloc::read_data), so no encoder writes it, and following it here would read what the decoder never
 * gets. So do data past the `budget` (the file's length, for all items together): extents that overlap,
 * no legit file's, would have this copy gigabytes. An extent of length 0 runs to the end of its source.
 */
function itemData(bytes: Buffer, meta: Box, location: Location | undefined, budget: { bytes: number }) {
  if (!location) return Buffer.alloc(0);
  if (location.method > 1) throw new RangeError(`construction method ${location.method}`);
  let source: Buffer = bytes;
  if (location.method === 1) {
    const idat = childOf(bytes, meta, 'idat', 4);
    if (!idat) throw new RangeError('no idat');
    source = bytes.subarray(idat.body, idat.end);
  }
  const parts: Buffer[] = [];
  for (const { offset, length } of location.extents) {
    const end = length === 0 ? source.length : offset + length;
    if (offset > source.length || end > source.length) throw new RangeError('extent past the end');
    budget.bytes -= end - offset;
    if (budget.bytes < 0) throw new RangeError('item data larger than the file');
    parts.push(source.subarray(offset, end));
  }
  return Buffer.concat(parts);
}

/** AV1 OBU types (AV1 spec §6.2.2). */
const OBU_SEQUENCE_HEADER = 1;

/**
 * The max_frame_width × max_frame_height of every sequence header OBU among the OBUs laid one after
 * another in `obus` (low-overhead format, §5.2); the walk stops at an OBU that runs past the end (the
 * decoder cannot decode it either). A sequence header cut short throws RangeError.
 */
function sequenceHeaderSizes(obus: Buffer): { width: number; height: number }[] {
  const sizes: { width: number; height: number }[] = [];
  let at = 0;
  while (at < obus.length) {
    // obu_header: forbidden bit, obu_type (4), obu_extension_flag, obu_has_size_field, reserved bit.
    const header = obus[at]!;
    const type = (header >> 3) & 15;
    const extension = (header >> 2) & 1;
    const hasSize = (header >> 1) & 1;
    at += 1 + extension;
    let size = obus.length - at;
    if (hasSize) {
      // leb128 (§4.10.5): at most 8 bytes, 7 bits each, least significant first.
      size = 0;
      for (let i = 0; ; i += 1) {
        if (i === 8 || at >= obus.length) throw new RangeError('leb128');
        const byte = obus[at]!;
        at += 1;
        size += (byte & 0x7f) * 2 ** (7 * i);
        if ((byte & 0x80) === 0) break;
      }
    }
    if (at + size > obus.length) break;
    if (type === OBU_SEQUENCE_HEADER) sizes.push(sequenceHeaderSize(obus.subarray(at, at + size)));
    at += size;
  }
  return sizes;
}

/** The maximum frame size a sequence_header_obu codes (AV1 spec §5.5.1–5.5.5). */
function sequenceHeaderSize(payload: Buffer): { width: number; height: number } {
  let bit = 0;
  const read = (n: number): number => {
    let value = 0;
    for (let i = 0; i < n; i += 1, bit += 1) {
      const byte = payload[bit >> 3];
      if (byte === undefined) throw new RangeError('sequence header cut short');
      value = value * 2 + ((byte >> (7 - (bit & 7))) & 1);
    }
    return value;
  };
  // uvlc (§4.10.3): leading zeros, a one, then as many bits.
  const uvlc = () => {
    let zeros = 0;
    while (read(1) === 0) zeros += 1;
    if (zeros >= 32) return 2 ** 32 - 1;
    return read(zeros) + 2 ** zeros - 1;
  };
  read(3); // seq_profile
  read(1); // still_picture
  const reduced = read(1);
  if (reduced)
    read(5); // seq_level_idx[0]
  else {
    let decoderModelInfo = 0;
    let bufferDelayLength = 0;
    if (read(1)) {
      // timing_info: num_units_in_display_tick, time_scale, equal_picture_interval
      read(32);
      read(32);
      if (read(1)) uvlc(); // num_ticks_per_picture_minus_1
      decoderModelInfo = read(1);
      if (decoderModelInfo) {
        // decoder_model_info: buffer_delay_length_minus_1, num_units_in_decoding_tick,
        // buffer_removal_time_length_minus_1, frame_presentation_time_length_minus_1
        bufferDelayLength = read(5) + 1;
        read(32);
        read(5);
        read(5);
      }
    }
    const initialDisplayDelay = read(1);
    const operatingPoints = read(5) + 1;
    for (let op = 0; op < operatingPoints; op += 1) {
      read(12); // operating_point_idc
      if (read(5) > 7) read(1); // seq_level_idx, seq_tier
      // operating_parameters_info: decoder_buffer_delay, encoder_buffer_delay, low_delay_mode_flag
      if (decoderModelInfo && read(1)) read(2 * bufferDelayLength + 1);
      if (initialDisplayDelay && read(1)) read(4); // initial_display_delay_minus_1
    }
  }
  const widthBits = read(4) + 1;
  const heightBits = read(4) + 1;
  return { width: read(widthBits) + 1, height: read(heightBits) + 1 };
}
