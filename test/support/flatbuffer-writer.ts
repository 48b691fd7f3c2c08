/**
 * Writes small FlatBuffers for tests of the TFLite reader (layers/convert/tflite-model.ts), laid out front
 * to back: each table's vtable just before it, its children (tables, vectors, strings) after it, so every
 * unsigned offset points forward as the format requires. Fields are given by id; a missing one is absent
 * from the vtable and reads as its default.
 */
export type FlatField =
  | { u8: number }
  | { i8: number }
  | { i32: number }
  | { u32: number }
  | { table: FlatTable }
  | { tables: FlatTable[] }
  | { i32s: readonly number[] }
  | { bytes: Uint8Array }
  | { string: string };

export type FlatTable = (FlatField | undefined)[];

type Child = Extract<
  FlatField,
  | { table: FlatTable }
  | { tables: FlatTable[] }
  | { i32s: readonly number[] }
  | { bytes: Uint8Array }
  | { string: string }
>;

class Writer {
  private readonly bytes: number[] = [];

  get length(): number {
    return this.bytes.length;
  }

  push(...values: number[]): void {
    this.bytes.push(...values);
  }

  uint16(value: number): void {
    this.bytes.push(value & 0xff, (value >> 8) & 0xff);
  }

  int32(value: number): void {
    const view = new DataView(new ArrayBuffer(4));
    view.setInt32(0, value, true);
    this.bytes.push(...new Uint8Array(view.buffer));
  }

  patchUint16(at: number, value: number): void {
    this.bytes[at] = value & 0xff;
    this.bytes[at + 1] = (value >> 8) & 0xff;
  }

  patchUint32(at: number, value: number): void {
    const view = new DataView(new ArrayBuffer(4));
    view.setUint32(0, value, true);
    new Uint8Array(view.buffer).forEach((byte, i) => (this.bytes[at + i] = byte));
  }

  result(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}

function writeTable(writer: Writer, fields: FlatTable): number {
  const vtable = writer.length;
  writer.uint16(4 + 2 * fields.length);
  writer.uint16(0); // the table's size, patched below
  for (let i = 0; i < fields.length; i += 1) writer.uint16(0);
  const table = writer.length;
  writer.int32(table - vtable);
  const children: { slot: number; child: Child }[] = [];
  fields.forEach((field, id) => {
    if (!field) return;
    writer.patchUint16(vtable + 4 + 2 * id, writer.length - table);
    if ('u8' in field) writer.push(field.u8 & 0xff);
    else if ('i8' in field) writer.push(field.i8 & 0xff);
    else if ('i32' in field) writer.int32(field.i32);
    else if ('u32' in field) writer.int32(field.u32 | 0);
    else {
      children.push({ slot: writer.length, child: field });
      writer.int32(0);
    }
  });
  writer.patchUint16(vtable + 2, writer.length - table);
  for (const { slot, child } of children) writer.patchUint32(slot, writeChild(writer, child) - slot);
  return table;
}

function writeChild(writer: Writer, child: Child): number {
  const at = writer.length;
  if ('table' in child) return writeTable(writer, child.table);
  if ('tables' in child) {
    writer.int32(child.tables.length);
    const slots = child.tables.map(() => {
      const slot = writer.length;
      writer.int32(0);
      return slot;
    });
    child.tables.forEach((table, i) => writer.patchUint32(slots[i]!, writeTable(writer, table) - slots[i]!));
    return at;
  }
  if ('i32s' in child) {
    writer.int32(child.i32s.length);
    for (const value of child.i32s) writer.int32(value);
    return at;
  }
  const bytes = 'bytes' in child ? child.bytes : new TextEncoder().encode(child.string);
  writer.int32(bytes.length);
  writer.push(...bytes);
  if ('string' in child) writer.push(0);
  return at;
}

/** The FlatBuffer whose root table is `root`. */
export function writeFlatBuffer(root: FlatTable): Uint8Array {
  const writer = new Writer();
  writer.int32(0);
  writer.patchUint32(0, writeTable(writer, root));
  return writer.result();
}
