import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { describe, expect, it, vi } from 'vitest';
import { av1CodedPixels } from '#lib/vision/heif-boxes.ts';

/** An ISO BMFF box. */
function box(type: string, ...payload: Buffer[]): Buffer {
  const body = Buffer.concat(payload);
  const header = Buffer.alloc(8);
  header.writeUInt32BE(8 + body.length, 0);
  header.write(type, 4, 'latin1');
  return Buffer.concat([header, body]);
}

/** A full box: version and flags, then the payload. */
function fullBox(type: string, version: number, ...payload: Buffer[]): Buffer {
  return box(type, Buffer.from([version, 0, 0, 0]), ...payload);
}

const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

/** infe version 2: item id, protection index, item type, an empty name. */
const infe = (id: number, type: string) =>
  fullBox('infe', 2, u16(id), u16(0), Buffer.from(type, 'latin1'), Buffer.from([0]));
const ispe = (width: number, height: number) => fullBox('ispe', 0, u32(width), u32(height));
const auxC = fullBox('auxC', 0, Buffer.from('urn:mpeg:mpegB:cicp:systems:auxiliary:alpha\0', 'latin1'));

/** ipma version 0, 7-bit property indices: [item id, 1-based property indices][]. */
function ipma(entries: [number, number[]][]): Buffer {
  return fullBox(
    'ipma',
    0,
    u32(entries.length),
    ...entries.map(([id, indices]) => Buffer.concat([u16(id), Buffer.from([indices.length, ...indices])])),
  );
}

/** Bits, most significant first, from [value, width] pairs, padded with a one then zeros (trailing bits). */
function bits(...fields: [number, number][]): Buffer {
  const out: number[] = [];
  for (const [value, width] of [...fields, [1, 1] as [number, number]])
    for (let i = width - 1; i >= 0; i -= 1) out.push(Math.floor(value / 2 ** i) % 2);
  while (out.length % 8) out.push(0);
  return Buffer.from(
    Array.from({ length: out.length / 8 }, (_, i) => parseInt(out.slice(i * 8, i * 8 + 8).join(''), 2)),
  );
}

/** An OBU with its size field (obu_type, then leb128 obu_size), optionally with an extension byte. */
function obu(type: number, payload: Buffer, extension = false): Buffer {
  const size: number[] = [];
  let n = payload.length;
  do {
    size.push((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    n >>= 7;
  } while (n > 0);
  return Buffer.concat([
    Buffer.from([(type << 3) | (extension ? 4 : 0) | 2, ...(extension ? [0] : [])]),
    Buffer.from(size),
    payload,
  ]);
}

/** A reduced still-picture sequence header OBU coding frames of up to width × height (16-bit fields). */
const sequenceHeader = (width: number, height: number) =>
  obu(1, bits([0, 3], [1, 1], [1, 1], [8, 5], [15, 4], [15, 4], [width - 1, 16], [height - 1, 16], [0, 8]));

/** A frame OBU (type 6) of filler bytes, standing for the coded picture. */
const frame = (length: number) => obu(6, Buffer.alloc(length, 0x5a));

/** av1C: marker and version, profile and level, flags, no initial presentation delay; then configOBUs. */
const av1C = (...configOBUs: Buffer[]) => box('av1C', Buffer.from([0x81, 0x08, 0x0c, 0x00]), ...configOBUs);

/** A grid's payload: version 0, flags (32-bit sizes when either is over 65535), rows and columns less one. */
function gridPayload(rows: number, columns: number, width: number, height: number): Buffer {
  const wide = width > 0xffff || height > 0xffff;
  const sizes = wide ? [u32(width), u32(height)] : [u16(width), u16(height)];
  return Buffer.concat([Buffer.from([0, wide ? 1 : 0, rows - 1, columns - 1]), ...sizes]);
}

/** An overlay's payload: version 0, flags 0, a fill colour, the canvas size, an offset (0, 0) per input. */
const overlayPayload = (inputs: number, width: number, height: number) =>
  Buffer.concat([Buffer.from([0, 0]), Buffer.alloc(8), u16(width), u16(height), Buffer.alloc(4 * inputs)]);

/** An extent of item data: bytes laid in idat, or an offset and length in the idat laid already. */
type Extent = Buffer | { offset: number; length: number };

/** An AVIF-like file: ftyp, then meta with the given items, properties, associations and references. */
function heif(options: {
  items: [number, string][];
  properties: Buffer[];
  associations: Buffer[];
  primary?: number;
  /** Planes and the images they belong to (auxl), one box each: [plane, image, other images…]. */
  auxiliaryOf?: [number, ...number[]][];
  /** Derived items and their inputs (dimg), an input named as often as it is used. */
  inputsOf?: [number, number[]][];
  /**
   * Item data by id, each buffer an extent, in idat (iloc version 1, construction method 1), or an extent
   * of the idat laid already (offset and length). An AV1 item left out gets a 1×1 sequence header and a
   * frame: a bitstream no larger than any ispe, so ispe decides.
   */
  data?: Map<number, Extent[]>;
  /** An item's iloc construction method (default 1, idat) and data reference index (default 0). */
  locations?: Map<number, { method?: number; dataReference?: number }>;
}): Buffer {
  const data = new Map(options.data);
  for (const [id, type] of options.items)
    if (type === 'av01' && !data.has(id)) data.set(id, [Buffer.concat([sequenceHeader(1, 1), frame(4)])]);
  let offset = 0;
  const locations = [...data].map(([id, extents]) =>
    Buffer.concat([
      u16(id),
      u16(options.locations?.get(id)?.method ?? 1), // construction method 1: idat
      u16(options.locations?.get(id)?.dataReference ?? 0),
      u16(extents.length),
      ...extents.map((extent) => {
        if (!Buffer.isBuffer(extent)) return Buffer.concat([u32(extent.offset), u32(extent.length)]);
        const entry = Buffer.concat([u32(offset), u32(extent.length)]);
        offset += extent.length;
        return entry;
      }),
    ]),
  );
  // offset_size 4, length_size 4, base_offset_size 0, index_size 0
  const iloc = fullBox('iloc', 1, Buffer.from([0x44, 0x00]), u16(data.size), ...locations);
  const idat = box('idat', ...[...data.values()].flat().filter((extent) => Buffer.isBuffer(extent)));
  const meta = fullBox(
    'meta',
    0,
    ...(options.primary !== undefined ? [fullBox('pitm', 0, u16(options.primary))] : []),
    fullBox('iinf', 0, u16(options.items.length), ...options.items.map(([id, type]) => infe(id, type))),
    box('iprp', box('ipco', ...options.properties), ...options.associations),
    ...(options.auxiliaryOf || options.inputsOf
      ? [
          fullBox(
            'iref',
            0,
            ...(options.auxiliaryOf ?? []).map(([from, ...to]) =>
              box('auxl', u16(from), u16(to.length), ...to.map(u16)),
            ),
            ...(options.inputsOf ?? []).map(([from, to]) =>
              box('dimg', u16(from), u16(to.length), ...to.map(u16)),
            ),
          ),
        ]
      : []),
    iloc,
    idat,
  );
  return Buffer.concat([box('ftyp', Buffer.from('avifmif1miafavif', 'latin1')), meta]);
}

/**
 * avifenc's layout of a 4096×4096 grid with alpha: the image, a grid (item 1) of two 2048×4096 tiles (2,
 * 3), and its alpha plane, a grid (4) of the same canvas and tiles (5, 6) with an auxl reference to the
 * image. `change` alters the options (their properties: the grids' ispe, the tiles', auxC).
 */
function gridWithAlpha(change: Partial<Parameters<typeof heif>[0]> = {}): Buffer {
  return heif({
    items: [
      [1, 'grid'],
      [2, 'av01'],
      [3, 'av01'],
      [4, 'grid'],
      [5, 'av01'],
      [6, 'av01'],
    ],
    properties: [ispe(4096, 4096), ispe(2048, 4096), auxC],
    associations: [
      ipma([
        [1, [1]],
        [2, [2]],
        [3, [2]],
        [4, [1, 3]],
        [5, [2]],
        [6, [2]],
      ]),
    ],
    primary: 1,
    auxiliaryOf: [[4, 1]],
    inputsOf: [
      [1, [2, 3]],
      [4, [5, 6]],
    ],
    data: new Map([
      [1, [gridPayload(1, 2, 4096, 4096)]],
      [4, [gridPayload(1, 2, 4096, 4096)]],
    ]),
    ...change,
  });
}

describe('av1CodedPixels', () => {
  it('sums the coded size of every AV1 image item', () => {
    // A grid of two 4100×4000 tiles (the grid item itself is no AV1 item)
    const file = heif({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(4100, 4000)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
        ]),
      ],
      primary: 1,
      data: new Map([[1, [gridPayload(1, 2, 64, 64)]]]),
    });
    expect(av1CodedPixels(file)).toBe(8200 * 4000);
  });

  it('leaves out an alpha plane (the source of an auxl reference), not an item that only carries auxC', () => {
    const alpha = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(4096, 4096), auxC],
      associations: [
        ipma([
          [1, [1]],
          [2, [1, 2]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 1]],
    });
    expect(av1CodedPixels(alpha)).toBe(4096 * 4096);
    // auxC on the primary item, and an auxl reference from it: it is decoded all the same
    const disguised = heif({
      items: [[1, 'av01']],
      properties: [ispe(8200, 4000), auxC],
      associations: [ipma([[1, [1, 2]]])],
      primary: 1,
      auxiliaryOf: [[1, 1]],
    });
    expect(av1CodedPixels(disguised)).toBe(8200 * 4000);
    const noReference = heif({
      items: [[1, 'av01']],
      properties: [ispe(8200, 4000), auxC],
      associations: [ipma([[1, [1, 2]]])],
    });
    expect(av1CodedPixels(noReference)).toBe(8200 * 4000);
  });

  it('reads the associations of every ipma box, and refuses an item associated twice', () => {
    const twoBoxes = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8200, 4000)],
      associations: [ipma([[1, [1]]]), ipma([[2, [2]]])],
      primary: 1,
    });
    expect(av1CodedPixels(twoBoxes)).toBe(64 * 64 + 8200 * 4000);
    // libheif reads an item's first association only: a size given in a second one is none to it
    const twice = heif({
      items: [[1, 'av01']],
      properties: [fullBox('pixi', 0, Buffer.from([3, 8, 8, 8])), ispe(64, 64)],
      associations: [ipma([[1, [1]]]), ipma([[1, [2]]])],
      primary: 1,
    });
    expect(av1CodedPixels(twice)).toBe(Number.POSITIVE_INFINITY);
  });

  it('counts an "alpha plane" larger than its image, or one that is also a grid tile', () => {
    const larger = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8192, 4096), auxC],
      associations: [
        ipma([
          [1, [1]],
          [2, [2, 3]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 1]],
    });
    expect(av1CodedPixels(larger)).toBe(64 * 64 + 8192 * 4096);
    const tile = heif({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8192, 4096), auxC, ispe(8192, 4096)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2, 3]],
          [3, [4]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 3]],
      inputsOf: [[1, [2]]],
      data: new Map([[1, [gridPayload(1, 1, 64, 64)]]]),
    });
    expect(av1CodedPixels(tile)).toBe(2 * 8192 * 4096);
  });

  it('is Infinity for an AV1 image item with no size, and undefined for no AV1 item or boxes cut short', () => {
    const noSize = heif({
      items: [[1, 'av01']],
      properties: [],
      associations: [ipma([[1, []]])],
      primary: 1,
    });
    expect(av1CodedPixels(noSize)).toBe(Number.POSITIVE_INFINITY);
    const hevc = heif({ items: [[1, 'hvc1']], properties: [ispe(64, 64)], associations: [ipma([[1, [1]]])] });
    expect(av1CodedPixels(hevc)).toBeUndefined();
    const file = heif({ items: [[1, 'av01']], properties: [ispe(64, 64)], associations: [ipma([[1, [1]]])] });
    expect(av1CodedPixels(file)).toBe(64 * 64);
    expect(av1CodedPixels(file.subarray(0, file.length - 3))).toBeUndefined();
  });

  it('counts the frame size the AV1 sequence header codes when ispe declares less', () => {
    // ispe says 64×64; the item's data (two extents, the sequence header cut across them) codes 8192×4096
    const data = Buffer.concat([obu(2, Buffer.alloc(0)), sequenceHeader(8192, 4096), frame(100)]);
    const hidden = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64)],
      associations: [ipma([[1, [1]]])],
      primary: 1,
      data: new Map([[1, [data.subarray(0, 5), data.subarray(5)]]]),
    });
    expect(av1CodedPixels(hidden)).toBe(8192 * 4096);
    // …or the av1C configOBUs code it (libheif hands them to the decoder before the item's data)
    const config = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64), av1C(sequenceHeader(8192, 4096))],
      associations: [ipma([[1, [1, 2]]])],
      primary: 1,
    });
    expect(av1CodedPixels(config)).toBe(8192 * 4096);
    // An alpha plane whose bitstream is larger than its image's is counted
    const alpha = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), auxC],
      associations: [
        ipma([
          [1, [1]],
          [2, [1, 2]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 1]],
      data: new Map([[2, [Buffer.concat([sequenceHeader(8192, 4096), frame(4)])]]]),
    });
    expect(av1CodedPixels(alpha)).toBe(64 * 64 + 8192 * 4096);
    // The larger of ispe and the bitstream, and the larger of several sequence headers
    const several = heif({
      items: [[1, 'av01']],
      properties: [ispe(640, 480), av1C(sequenceHeader(100, 100))],
      associations: [ipma([[1, [1, 2]]])],
      data: new Map([
        [1, [Buffer.concat([sequenceHeader(320, 240), obu(1, sequenceHeader(1, 1).subarray(2), true)])]],
      ]),
    });
    expect(av1CodedPixels(several)).toBe(640 * 480);
  });

  it('is Infinity for an AV1 item with no sequence header, undefined for one cut short', () => {
    const none = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64), av1C()],
      associations: [ipma([[1, [1, 2]]])],
      data: new Map([[1, [frame(50)]]]),
    });
    expect(av1CodedPixels(none)).toBe(Number.POSITIVE_INFINITY);
    const cut = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64)],
      associations: [ipma([[1, [1]]])],
      data: new Map([[1, [obu(1, Buffer.from([0x18, 0x4f]))]]]),
    });
    expect(av1CodedPixels(cut)).toBeUndefined();
  });

  it('reads the data whatever its data reference (as libheif does), refuses data built from items', () => {
    // av1C codes 64×64; the data, said to lie in another file, codes 8192×4096 and is what libheif decodes
    const file = (location: { method?: number; dataReference?: number }) =>
      heif({
        items: [[1, 'av01']],
        properties: [ispe(64, 64), av1C(sequenceHeader(64, 64))],
        associations: [ipma([[1, [1, 2]]])],
        primary: 1,
        data: new Map([[1, [Buffer.concat([sequenceHeader(8192, 4096), frame(4)])]]]),
        locations: new Map([[1, location]]),
      });
    expect(av1CodedPixels(file({ dataReference: 1 }))).toBe(8192 * 4096);
    // construction method 2 (data from other items' data): libheif cannot decode it, no encoder writes it
    expect(av1CodedPixels(file({ method: 2 }))).toBeUndefined();
  });

  it("reads all of an item's data: a sequence header after 64 KB counts, and none there is Infinity", () => {
    // libaom decodes every frame of the data: the second, after a 70 KB one, at 8192×4096
    const later = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64), av1C(sequenceHeader(64, 64))],
      associations: [ipma([[1, [1, 2]]])],
      primary: 1,
      data: new Map([[1, [Buffer.concat([frame(70_000), sequenceHeader(8192, 4096), frame(4)])]]]),
    });
    expect(av1CodedPixels(later)).toBe(8192 * 4096);
    // No sequence header in the av1C nor in the 70 KB of data (padding, then a frame)
    const none = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64)],
      associations: [ipma([[1, [1]]])],
      data: new Map([[1, [Buffer.concat([obu(15, Buffer.alloc(70_000)), frame(4)])]]]),
    });
    expect(av1CodedPixels(none)).toBe(Number.POSITIVE_INFINITY);
    // Extents read again and again (data larger than the file, no legit file's) are refused, not copied
    const data = Buffer.concat([sequenceHeader(64, 64), frame(1000)]);
    const again = (times: number) =>
      heif({
        items: [
          [1, 'av01'],
          [2, 'av01'],
        ],
        properties: [ispe(64, 64)],
        associations: [
          ipma([
            [1, [1]],
            [2, [1]],
          ]),
        ],
        primary: 1,
        data: new Map<number, Extent[]>([
          [1, [data]],
          [2, Array.from({ length: times }, () => ({ offset: 0, length: sequenceHeader(64, 64).length }))],
        ]),
      });
    expect(av1CodedPixels(again(2))).toBe(2 * 64 * 64);
    expect(av1CodedPixels(again(200))).toBeUndefined();
    // Items whose data are the same extents (avifenc stores identical tiles once) are read once: five
    // items naming the same 1 KB count, though their data add up to more than the file
    const ids = [1, 2, 3, 4, 5];
    const sameData = heif({
      items: ids.map((id): [number, string] => [id, 'av01']),
      properties: [ispe(64, 64)],
      associations: [ipma(ids.map((id): [number, number[]] => [id, [1]]))],
      primary: 1,
      data: new Map<number, Extent[]>(
        ids.map((id) => [id, [id === 1 ? data : { offset: 0, length: data.length }]]),
      ),
    });
    expect(5 * data.length).toBeGreaterThan(sameData.length);
    expect(av1CodedPixels(sameData)).toBe(5 * 64 * 64);
  });

  it('reads an av1C once however many items share it (250 items, 2 MB of padding OBUs)', () => {
    // Each item read the shared configOBUs again: 4 MB of them took 7 s of the event loop (fuzzing)
    const padding = Buffer.alloc(2_000_000).fill(obu(15, Buffer.alloc(0))); // a million empty padding OBUs
    const ids = Array.from({ length: 250 }, (_, i) => i + 1);
    const file = heif({
      items: ids.map((id): [number, string] => [id, 'av01']),
      properties: [ispe(64, 64), av1C(padding, sequenceHeader(64, 64))],
      associations: [ipma(ids.map((id): [number, number[]] => [id, [1, 2]]))],
      primary: 1,
    });
    // Counted, not timed: the views of the configOBUs taken to walk them (one per read of the box)
    const subarray = vi.spyOn(Buffer.prototype, 'subarray');
    try {
      expect(av1CodedPixels(file)).toBe(250 * 64 * 64);
      const walks = subarray.mock.calls.filter(
        ([start, end]) => Number(end ?? 0) - Number(start ?? 0) >= padding.length,
      );
      expect(walks).toHaveLength(1);
    } finally {
      subarray.mockRestore();
    }
  });

  it('looks at the frames an av1C or an extent codes once, however many items share them', () => {
    // Prepare: 256 items (libheif's limit) sharing 20,000 sequence headers, in their data or in an av1C;
    // each item went through them all again (100,000 of them: 4 s of the event loop for a 1 MB file)
    const headers = Buffer.concat(Array.from({ length: 20_000 }, () => sequenceHeader(64, 64)));
    const ids = Array.from({ length: 256 }, (_, i) => i + 1);
    const items = ids.map((id): [number, string] => [id, 'av01']);
    const sharedData = heif({
      items,
      properties: [ispe(64, 64), av1C(sequenceHeader(64, 64))],
      associations: [ipma(ids.map((id): [number, number[]] => [id, [1, 2]]))],
      primary: 1,
      data: new Map<number, Extent[]>(
        ids.map((id) => [id, id === 1 ? [headers] : [{ offset: 0, length: headers.length }]]),
      ),
    });
    const sharedConfig = heif({
      items,
      properties: [ispe(64, 64), av1C(headers)],
      associations: [ipma(ids.map((id): [number, number[]] => [id, [1, 2]]))],
      primary: 1,
    });
    // Act + Assess: counted, not timed: the frame areas Math.max compares, a few per frame at most
    const max = vi.spyOn(Math, 'max');
    try {
      for (const file of [sharedData, sharedConfig]) {
        max.mockClear();
        expect(av1CodedPixels(file)).toBe(256 * 64 * 64);
        const compared = max.mock.calls.reduce((sum, args) => sum + args.length, 0);
        expect(compared).toBeLessThan(3 * 20_000);
      }
    } finally {
      max.mockRestore();
    }
  });

  it("counts a grid's or an overlay's canvas at its payload's size, not added to its tiles", () => {
    const grid = (payload: Buffer | undefined, declared = ispe(64, 64)) =>
      heif({
        items: [
          [1, 'grid'],
          [2, 'av01'],
          [3, 'av01'],
        ],
        properties: [declared, ispe(64, 64)],
        associations: [
          ipma([
            [1, [1]],
            [2, [2]],
            [3, [2]],
          ]),
        ],
        primary: 1,
        inputsOf: [[1, [2, 3]]],
        data: new Map<number, Extent[]>(payload ? [[1, [payload]]] : []),
      });
    // Two 64×64 tiles, the grid declared 64×64, on an 8192×8192 canvas: libheif allocates it all
    expect(av1CodedPixels(grid(gridPayload(1, 2, 8192, 8192)))).toBe(8192 * 8192);
    expect(av1CodedPixels(grid(gridPayload(1, 2, 70_000, 300)))).toBe(70_000 * 300); // 32-bit sizes
    expect(av1CodedPixels(grid(gridPayload(1, 2, 64, 64), ispe(8192, 4096)))).toBe(8192 * 4096);
    // A payload missing, or cut short, is refused
    expect(av1CodedPixels(grid(undefined))).toBeUndefined();
    expect(av1CodedPixels(grid(gridPayload(1, 2, 8192, 8192).subarray(0, 7)))).toBeUndefined();
    const overlay = heif({
      items: [
        [1, 'iovl'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64)],
      associations: [
        ipma([
          [1, [1]],
          [2, [1]],
        ]),
      ],
      primary: 1,
      inputsOf: [[1, [2]]],
      data: new Map([[1, [overlayPayload(1, 8192, 4096)]]]),
    });
    expect(av1CodedPixels(overlay)).toBe(8192 * 4096);
    // A legit grid (avifenc --grid 2x2: four 1024×768 tiles on a 2048×1536 canvas): counted once
    const real = readFileSync(
      join(import.meta.dirname, '../../fixtures/vision/avif-grid-2048x1536-2x2.avif'),
    );
    expect(av1CodedPixels(real)).toBe(2048 * 1536);
    const canvas = real.indexOf(gridPayload(2, 2, 2048, 1536));
    real.writeUInt16BE(8192, canvas + 4);
    real.writeUInt16BE(8192, canvas + 6);
    expect(av1CodedPixels(real)).toBe(8192 * 8192);
  });

  it('counts an item once per reference a grid or an overlay makes to it (each decodes it)', () => {
    // A 1×3 grid naming one 4096×4096 tile in all of its cells, on a 64×64 canvas
    const repeated = heif({
      items: [
        [1, 'grid'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(4096, 4096)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
        ]),
      ],
      primary: 1,
      inputsOf: [[1, [2, 2, 2]]],
      data: new Map([[1, [gridPayload(1, 3, 64, 64)]]]),
    });
    expect(av1CodedPixels(repeated)).toBe(3 * 4096 * 4096);
    // An overlay naming a grid twice, the grid a tile twice: the tile is decoded four times
    const nested = heif({
      items: [
        [1, 'iovl'],
        [2, 'grid'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(1000, 1000)],
      associations: [
        ipma([
          [1, [1]],
          [2, [1]],
          [3, [2]],
        ]),
      ],
      primary: 1,
      inputsOf: [
        [1, [2, 2]],
        [2, [3, 3]],
      ],
      data: new Map([
        [1, [overlayPayload(2, 64, 64)]],
        [2, [gridPayload(1, 2, 64, 64)]],
      ]),
    });
    expect(av1CodedPixels(nested)).toBe(4 * 1000 * 1000);
    // ...and a canvas once per decode of its grid: the overlay decodes the 3000 × 3000 grid twice
    const canvases = heif({
      items: [
        [1, 'iovl'],
        [2, 'grid'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64)],
      associations: [
        ipma([
          [1, [1]],
          [2, [1]],
          [3, [1]],
        ]),
      ],
      primary: 1,
      inputsOf: [
        [1, [2, 2]],
        [2, [3]],
      ],
      data: new Map([
        [1, [overlayPayload(2, 64, 64)]],
        [2, [gridPayload(1, 1, 3000, 3000)]],
      ]),
    });
    expect(av1CodedPixels(canvases)).toBe(2 * 3000 * 3000 + 64 * 64);
    // A reference counting more ids than its box holds is refused (they were read from the boxes after it)
    const overcounted = Buffer.from(nested);
    const dimg = overcounted.indexOf('dimg', 0, 'latin1');
    overcounted.writeUInt16BE(overcounted.readUInt16BE(dimg + 4 + 2) + 2, dimg + 4 + 2);
    expect(av1CodedPixels(overcounted)).toBeUndefined();
    // A cycle of references (libheif refuses it) is refused
    const cycle = heif({
      items: [
        [1, 'grid'],
        [2, 'grid'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64)],
      associations: [
        ipma([
          [1, [1]],
          [2, [1]],
          [3, [1]],
        ]),
      ],
      primary: 1,
      inputsOf: [
        [1, [2]],
        [2, [1, 3]],
      ],
      data: new Map([
        [1, [gridPayload(1, 1, 64, 64)]],
        [2, [gridPayload(1, 2, 64, 64)]],
      ]),
    });
    expect(av1CodedPixels(cycle)).toBeUndefined();
  });

  it("leaves out a grid's alpha grid no larger than it, its tiles with it (avifenc's grid with alpha)", () => {
    // Counted with its tiles, the alpha doubled the count: a 4096×4096 grid with alpha was refused
    expect(av1CodedPixels(gridWithAlpha())).toBe(4096 * 4096);
    // A depth grid too: an image's auxiliary planes are counted like its alpha
    const alphaAndDepth = gridWithAlpha({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
        [4, 'grid'],
        [5, 'av01'],
        [6, 'av01'],
        [7, 'grid'],
        [8, 'av01'],
      ],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
          [4, [1, 3]],
          [5, [2]],
          [6, [2]],
          [7, [1]],
          [8, [1]],
        ]),
      ],
      auxiliaryOf: [
        [4, 1],
        [7, 1],
      ],
      inputsOf: [
        [1, [2, 3]],
        [4, [5, 6]],
        [7, [8]],
      ],
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 2, 4096, 4096)]],
        [7, [gridPayload(1, 1, 4096, 4096)]],
      ]),
    });
    expect(av1CodedPixels(alphaAndDepth)).toBe(4096 * 4096);
  });

  it('counts an alpha grid whose tiles or canvas outgrow the image, or whose tiles it shares', () => {
    // Tiles declared 8192×4096 each under the alpha's 4096×4096 canvas: the decoder decodes them in full
    const largeTiles = gridWithAlpha({
      properties: [ispe(4096, 4096), ispe(2048, 4096), auxC, ispe(8192, 4096)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
          [4, [1, 3]],
          [5, [4]],
          [6, [4]],
        ]),
      ],
    });
    expect(av1CodedPixels(largeTiles)).toBe(4096 * 4096 + 2 * 8192 * 4096);
    // …or tiles declared 2048×4096 whose bitstream codes 8192×4096
    const codedLarge = gridWithAlpha({
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 2, 4096, 4096)]],
        [5, [Buffer.concat([sequenceHeader(8192, 4096), frame(4)])]],
      ]),
    });
    expect(av1CodedPixels(codedLarge)).toBe(4096 * 4096 + 8192 * 4096 + 2048 * 4096);
    // One tile named twice: 2 × 2048×4096 more than the image's tiles
    const named = gridWithAlpha({
      inputsOf: [
        [1, [2, 3]],
        [4, [5, 6, 6]],
      ],
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 3, 4096, 4096)]],
      ]),
    });
    expect(av1CodedPixels(named)).toBe(4096 * 4096 + 3 * 2048 * 4096);
    // A canvas wider than the image's (of the same area), by its payload
    const wider = gridWithAlpha({
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 2, 8192, 2048)]],
      ]),
    });
    expect(av1CodedPixels(wider)).toBe(2 * 4096 * 4096);
    // A tile of the image's grid named by the alpha grid too (tile 6 named by no grid: counted once)
    const shared = gridWithAlpha({
      inputsOf: [
        [1, [2, 3]],
        [4, [5, 2]],
      ],
    });
    expect(av1CodedPixels(shared)).toBe(4096 * 4096 + 3 * 2048 * 4096);
    // A tile of the alpha grid that is a plane (of the image's tile 2), or the image of one (tile 2)
    const tilePlanes: [number, number][] = [
      [6, 2],
      [2, 5],
    ];
    for (const tilePlane of tilePlanes)
      expect(av1CodedPixels(gridWithAlpha({ auxiliaryOf: [[4, 1], tilePlane] })), `${tilePlane}`).toBe(
        2 * 4096 * 4096,
      );
  });

  it('counts an alpha grid that is the primary item or an input, or one of whose tiles is primary', () => {
    expect(av1CodedPixels(gridWithAlpha({ primary: 4 }))).toBe(2 * 4096 * 4096);
    expect(av1CodedPixels(gridWithAlpha({ primary: 5 }))).toBe(2 * 4096 * 4096);
    // An overlay (7) of the alpha grid: the canvases of the grids and of the overlay count
    const input = gridWithAlpha({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
        [4, 'grid'],
        [5, 'av01'],
        [6, 'av01'],
        [7, 'iovl'],
      ],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
          [4, [1, 3]],
          [5, [2]],
          [6, [2]],
          [7, [1]],
        ]),
      ],
      inputsOf: [
        [1, [2, 3]],
        [4, [5, 6]],
        [7, [4]],
      ],
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 2, 4096, 4096)]],
        [7, [overlayPayload(1, 4096, 4096)]],
      ]),
    });
    expect(av1CodedPixels(input)).toBe(3 * 4096 * 4096);
  });

  it('counts a plane that belongs to several images, to a plane, or to itself', () => {
    // An alpha grid naming two images (in two auxl boxes, or in one: libheif refuses that)
    const twoImages = (auxiliaryOf: [number, ...number[]][]) =>
      gridWithAlpha({
        items: [
          [1, 'grid'],
          [2, 'av01'],
          [3, 'av01'],
          [4, 'grid'],
          [5, 'av01'],
          [6, 'av01'],
          [7, 'grid'],
        ],
        associations: [
          ipma([
            [1, [1]],
            [2, [2]],
            [3, [2]],
            [4, [1, 3]],
            [5, [2]],
            [6, [2]],
            [7, [1]],
          ]),
        ],
        auxiliaryOf,
        inputsOf: [
          [1, [2, 3]],
          [4, [5, 6]],
          [7, [2, 3]],
        ],
        data: new Map([
          [1, [gridPayload(1, 2, 4096, 4096)]],
          [4, [gridPayload(1, 2, 4096, 4096)]],
          [7, [gridPayload(1, 2, 4096, 4096)]],
        ]),
      });
    // The images' tiles twice (each grid decodes them), and the alpha's
    const counted = 2 * 4096 * 4096 + 4096 * 4096;
    expect(av1CodedPixels(twoImages([[4, 1, 7]]))).toBe(counted);
    expect(
      av1CodedPixels(
        twoImages([
          [4, 1],
          [4, 7],
        ]),
      ),
    ).toBe(counted);
    // An AV1 alpha plane naming two images: counted too (it was left out as the one it named first or in
    // its last box)
    const plain = (auxiliaryOf: [number, ...number[]][]) =>
      heif({
        items: [
          [1, 'av01'],
          [2, 'av01'],
          [3, 'av01'],
        ],
        properties: [ispe(4096, 4096), ispe(64, 64), auxC],
        associations: [
          ipma([
            [1, [1]],
            [2, [1, 3]],
            [3, [2]],
          ]),
        ],
        primary: 1,
        auxiliaryOf,
      });
    expect(av1CodedPixels(plain([[2, 1, 3]]))).toBe(2 * 4096 * 4096 + 64 * 64);
    expect(
      av1CodedPixels(
        plain([
          [2, 3],
          [2, 1],
        ]),
      ),
    ).toBe(2 * 4096 * 4096 + 64 * 64);
    // A chain (a grid whose image is the alpha grid) and a cycle (the image the alpha grid's plane)
    const chain = gridWithAlpha({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
        [4, 'grid'],
        [5, 'av01'],
        [6, 'av01'],
        [7, 'grid'],
        [8, 'av01'],
      ],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
          [4, [1, 3]],
          [5, [2]],
          [6, [2]],
          [7, [1]],
          [8, [1]],
        ]),
      ],
      auxiliaryOf: [
        [4, 1],
        [7, 4],
      ],
      inputsOf: [
        [1, [2, 3]],
        [4, [5, 6]],
        [7, [8]],
      ],
      data: new Map([
        [1, [gridPayload(1, 2, 4096, 4096)]],
        [4, [gridPayload(1, 2, 4096, 4096)]],
        [7, [gridPayload(1, 1, 4096, 4096)]],
      ]),
    });
    expect(av1CodedPixels(chain)).toBe(2 * 4096 * 4096);
    const cycle = gridWithAlpha({
      auxiliaryOf: [
        [4, 1],
        [1, 4],
      ],
    });
    expect(av1CodedPixels(cycle)).toBe(2 * 4096 * 4096);
  });

  it('reads a full sequence header: timing info, decoder model and operating points', () => {
    const full = obu(
      1,
      bits(
        [0, 3], // seq_profile
        [0, 1], // still_picture
        [0, 1], // reduced_still_picture_header
        [1, 1], // timing_info_present_flag
        [1001, 32], // num_units_in_display_tick
        [60000, 32], // time_scale
        [1, 1], // equal_picture_interval
        [0b00110, 5], // num_ticks_per_picture_minus_1 = 5 (uvlc)
        [1, 1], // decoder_model_info_present_flag
        [9, 5], // buffer_delay_length_minus_1: delays of 10 bits
        [1001, 32], // num_units_in_decoding_tick
        [4, 5], // buffer_removal_time_length_minus_1
        [4, 5], // frame_presentation_time_length_minus_1
        [1, 1], // initial_display_delay_present_flag
        [1, 5], // operating_points_cnt_minus_1: two
        [0x103, 12], // operating_point_idc[0]
        [13, 5], // seq_level_idx[0] (5.1), over 7:
        [1, 1], // seq_tier[0]
        [1, 1], // decoder_model_present_for_this_op[0]
        [0x3ff, 10], // decoder_buffer_delay
        [0x155, 10], // encoder_buffer_delay
        [1, 1], // low_delay_mode_flag
        [1, 1], // initial_display_delay_present_for_this_op[0]
        [9, 4], // initial_display_delay_minus_1
        [0x101, 12], // operating_point_idc[1]
        [5, 5], // seq_level_idx[1] (3.1): no tier
        [0, 1], // decoder_model_present_for_this_op[1]
        [0, 1], // initial_display_delay_present_for_this_op[1]
        [12, 4], // frame_width_bits_minus_1
        [11, 4], // frame_height_bits_minus_1
        [8191, 13], // max_frame_width_minus_1
        [4095, 12], // max_frame_height_minus_1
        [0, 16], // the rest, not read
      ),
    );
    const file = heif({
      items: [[1, 'av01']],
      properties: [ispe(64, 64), av1C(full)],
      associations: [ipma([[1, [1, 2]]])],
      data: new Map([[1, [frame(10)]]]),
    });
    expect(av1CodedPixels(file)).toBe(8192 * 4096);
  });

  it('reads the sequence header of a sharp-written AVIF (iloc file offsets, no configOBUs)', async () => {
    const avif = await sharp({ create: { width: 1200, height: 800, channels: 3, background: '#888' } })
      .avif({ effort: 0 })
      .toBuffer();
    expect(av1CodedPixels(avif)).toBe(1200 * 800);
    // ispe patched down to 64×64: the bitstream still codes 1200×800
    const at = avif.indexOf('ispe', 0, 'latin1');
    avif.writeUInt32BE(64, at + 8);
    avif.writeUInt32BE(64, at + 12);
    expect(av1CodedPixels(avif)).toBe(1200 * 800);
  });
});
