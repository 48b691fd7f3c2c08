import { isUtf8 } from 'node:buffer';
import { parse as parseCsv } from 'csv-parse';
import { SaxesParser } from 'saxes';

/**
 * Streaming readers of the feed formats (DESIGN §5). Each turns a byte stream into raw records, one per
 * product, without holding the feed in memory; a record that cannot be read becomes a row error and the
 * stream goes on. Field names are the feed's own (g:id → id); lib/domain/catalogue/normalise.ts maps them.
 */
export const FEED_FORMATS = ['xml', 'csv', 'tsv', 'json', 'jsonl'] as const;
export type FeedFormat = (typeof FEED_FORMATS)[number];

/** Values of one record by field name; repeated fields (g:additional_image_link) collect several. */
export type RawFields = Record<string, (string | number)[]>;

/**
 * One product of the feed, or why its row could not be read. `row` is its 1-based position in the feed.
 * A `fatal` error ends the stream: the rest of the file is unreadable (so a full import must not treat
 * the products after it as removed).
 */
export type RawRecord =
  | { row: number; fields: RawFields }
  | {
      row: number;
      error: string;
      fatal?: true;
      /**
       * The row's text could not be read as a value at all (broken JSON, too long, nested too deep), so
       * it may have listed any product; a row that reads but is not a product (`null`, `1`) is not.
       */
      unreadable?: true;
    };

/**
 * A feed file's bytes, chunk by chunk. Bytes only: every caller reads a stored file (inline content is
 * stored as UTF-8 bytes too), and text mixed in would have to keep its place among bytes that decode holds.
 */
export type ByteSource = AsyncIterable<Buffer | Uint8Array>;

export function readFeed(source: ByteSource, format: FeedFormat): AsyncGenerator<RawRecord> {
  switch (format) {
    case 'xml':
      return readXml(source);
    case 'csv':
      return readDelimited(source, false);
    case 'tsv':
      return readDelimited(source, true);
    case 'json':
      return readJsonArray(source);
    case 'jsonl':
      return readJsonLines(source);
  }
}

/** The first bytes of a feed file as text, in its encoding (feedDecoder), for sniffFormat. */
export function headText(bytes: Buffer): string {
  return feedDecoder(bytes).decode(bytes);
}

/** Guesses the format from the first bytes of a feed (used for URL imports without an explicit format). */
export function sniffFormat(head: string): FeedFormat {
  const text = head.replace(/^\uFEFF/, '').trimStart();
  if (text.startsWith('<')) return 'xml';
  if (text.startsWith('[')) return 'json';
  if (text.startsWith('{')) return 'jsonl';
  return firstLine(text).includes('\t') ? 'tsv' : 'csv';
}

/**
 * Line endings of the line formats (CSV, TSV, JSON Lines): CRLF, LF and a lone CR (old Mac files), in any
 * mix, each ending its own line. Taken from the first line alone, a header ending in CRLF made every later
 * LF-only row part of the first record; an LF-only reader saw a CR-only file as one line.
 */
const LINE_ENDINGS = ['\r\n', '\n', '\r'];

/** A pattern of LINE_ENDINGS, CRLF first so that it is one ending. New per use: `g` keeps a position. */
function lineEnd(): RegExp {
  return new RegExp(LINE_ENDINGS.join('|'), 'g');
}

/** The text before its first line ending (all of it without one). */
function firstLine(text: string): string {
  return text.split(lineEnd(), 1)[0] ?? '';
}

/**
 * A feed's text, chunk by chunk. Bytes are ASCII until the first that is not, the same in every encoding
 * read here; the encoding is told there (feedDecoder, from the bytes seen so far and that chunk's rest).
 * Read as UTF-8 whatever it was, a shop's Latin-1 file (an Excel CSV export, XML declaring ISO-8859-1) had
 * each accented letter replaced by U+FFFD, so that `café` and `cafè` became one product id.
 */
async function* decode(source: ByteSource): AsyncGenerator<string> {
  let decoder: FeedDecoder | undefined;
  // The first bytes seen (ASCII so far): where a byte-order mark or an XML declaration is.
  let start = '';
  // Bytes held while they are too few to tell the encoding by: the file's first (fewer than UTF16_HEAD),
  // or the first that is not ASCII too near their end to tell UTF-8 by.
  let held: Buffer | undefined;
  for await (const chunk of source) {
    let bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
    if (!decoder) {
      if (held) [bytes, held] = [Buffer.concat([held, bytes]), undefined];
      const marked = start === '' && startEncoding(bytes) !== undefined;
      // (Searched in the text: a byte-by-byte callback cost more than the parse on large ASCII feeds.)
      const ascii = bytes.toString('latin1');
      const other = ascii.search(NOT_ASCII);
      const tooFew =
        (start === '' && bytes.length < UTF16_HEAD) || (other !== -1 && bytes.length - other < 4);
      if (tooFew && !marked) {
        held = bytes;
        continue;
      }
      if (other === -1 && !marked) {
        if (start.length < 200) start += ascii.slice(0, 200);
        if (ascii) yield ascii;
        continue;
      }
      decoder = decoderAfter(start, bytes);
    }
    const text = decoder.decode(bytes, { stream: true });
    if (text) yield text;
  }
  if (held) {
    decoder = decoderAfter(start, held, true);
    const text = decoder.decode(held, { stream: true });
    if (text) yield text;
  }
  const rest = decoder?.decode() ?? '';
  if (rest) yield rest;
}

/** A byte that is not ASCII, in bytes read as Latin-1 text. */
const NOT_ASCII = /[\x80-\xff]/;

/** The encoding the first bytes of a file tell by themselves: a byte-order mark, or UTF-16 without one. */
function startEncoding(bytes: Buffer): string | undefined {
  return byteOrderMark(bytes) ?? unmarkedUtf16(bytes);
}

/** The encoding a UTF-8 or UTF-16 byte-order mark at the start of `bytes` names. */
function byteOrderMark(bytes: Buffer): string | undefined {
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return 'utf-8';
  if (bytes[0] === 0xff && bytes[1] === 0xfe) return 'utf-16le';
  if (bytes[0] === 0xfe && bytes[1] === 0xff) return 'utf-16be';
  return undefined;
}

/** How many first bytes unmarkedUtf16 reads: two ASCII characters in UTF-16. */
const UTF16_HEAD = 4;

/**
 * UTF-16 without a byte-order mark, when the file's first UTF16_HEAD bytes are ASCII characters with a
 * NUL beside each (`<\0?\0` little-endian, `\0<\0?` big-endian), as a feed in UTF-16 starts (`<?xml`, `[`,
 * `{`, a CSV header): read as ASCII, NULs came between its letters, a feed of no product. No feed in
 * an 8-bit encoding or UTF-8 starts so: NUL is no XML, JSON or CSV text. A first letter that is not
 * ASCII is no such evidence, and is left to the rest of feedDecoder.
 */
function unmarkedUtf16(bytes: Buffer): string | undefined {
  if (bytes.length < UTF16_HEAD) return undefined;
  const asciiAt = (i: number) => bytes[i]! > 0 && bytes[i]! < 0x80;
  if (asciiAt(0) && bytes[1] === 0 && asciiAt(2) && bytes[3] === 0) return 'utf-16le';
  if (bytes[0] === 0 && asciiAt(1) && bytes[2] === 0 && asciiAt(3)) return 'utf-16be';
  return undefined;
}

/**
 * feedDecoder of `bytes` (a chunk holding the first byte that is not ASCII, or a startEncoding) after
 * `start`, the ASCII before them: past the file's start, the chunk's ASCII before that byte joins `start`
 * (it may end a declaration) and the evidence is the chunk from that byte on.
 */
function decoderAfter(start: string, bytes: Buffer, last = false): FeedDecoder {
  if (start === '') return feedDecoder(bytes, '', last);
  const ascii = bytes.toString('latin1');
  const other = ascii.search(NOT_ASCII);
  return feedDecoder(bytes.subarray(other), start + ascii.slice(0, other), last);
}

/** What decode needs of a decoder: TextDecoder's `decode`, streaming or at the file's end. */
interface FeedDecoder {
  decode(bytes?: Buffer, options?: { stream: boolean }): string;
}

/**
 * The decoder of a feed file: a byte-order mark (UTF-8, UTF-16) or UTF-16 without one (unmarkedUtf16) at
 * its start, else the encoding an XML declaration among its first bytes names (when TextDecoder knows
 * it), else UTF-8 when `bytes` (from the first byte that is not ASCII to the end of its chunk) are UTF-8
 * (a character cut at their end aside), else Windows-1252 (what WHATWG decoders read Latin-1 labels as,
 * and what spreadsheet exports of Western European shops write). A file its bytes tell as UTF-8 reads a
 * later byte that is no UTF-8 as Windows-1252 (Utf8ElseWindows1252Decoder); one that declares UTF-8 reads
 * it as U+FFFD, as it always has. `last`: `bytes` end the file (a character cut there is no UTF-8).
 */
function feedDecoder(bytes: Buffer, start = '', last = false): FeedDecoder {
  const marked = start === '' ? startEncoding(bytes) : undefined;
  if (marked) return new TextDecoder(marked);
  let utf8 = true;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: !last });
  } catch {
    utf8 = false;
  }
  const head = (start + bytes.toString('latin1', 0, 200)).slice(0, 200);
  const declared = /^\s*<\?xml[^>]*?\bencoding\s*=\s*["']([A-Za-z0-9._:-]{1,40})["']/.exec(head)?.[1];
  if (declared) {
    try {
      const encoding = new TextDecoder(declared).encoding;
      // A declaration read as ASCII says the file is not UTF-16, whatever it names (no BOM either). And
      // letters that are UTF-8 in a file declared as another (a common mislabel: feeds written in UTF-8
      // under an ISO-8859-1 declaration) are UTF-8: Latin-1 text is hardly ever valid UTF-8 (`Ã©`).
      const mislabelled = utf8 && encoding !== 'utf-8' && NOT_ASCII.test(bytes.toString('latin1'));
      if (!encoding.startsWith('utf-16') && !mislabelled) return new TextDecoder(encoding);
    } catch {
      // A label TextDecoder does not know: read as the bytes say below.
    }
  }
  return utf8 ? new Utf8ElseWindows1252Decoder() : new TextDecoder('windows-1252');
}

/**
 * UTF-8 where the bytes are UTF-8, and Windows-1252 for each byte that is no part of a UTF-8 character
 * (where TextDecoder gives U+FFFD): feeds are often exports in different encodings put end to end, so a
 * file whose first letters told UTF-8 may hold a Latin-1 export's rows further on, and U+FFFD made `café`
 * and `cafè` one product id there. Streams as TextDecoder does: a character a chunk's end cuts (3 bytes at
 * most) waits for the next chunk, and is Windows-1252 if the file ends instead.
 */
class Utf8ElseWindows1252Decoder implements FeedDecoder {
  /**
   * Decodes runs of whole UTF-8 characters, as a stream although none is cut: Node 20's one-shot decode
   * (and Buffer's toString) took three times as long on 64 MB of UTF-8 in 64 KB chunks. A byte-order mark
   * is text, as in the byte-by-byte path (utf8ElseWindows1252), whatever chunk it starts.
   */
  private readonly utf8 = new TextDecoder('utf-8', { ignoreBOM: true });
  /** The start of a character the previous chunk's end cut (a copy: the caller may reuse its memory). */
  private cut: Buffer | undefined;

  decode(chunk: Buffer = Buffer.alloc(0), options?: { stream: boolean }): string {
    const { text, rest } = this.cut ? joinCut(this.cut, chunk) : { text: '', rest: chunk };
    const end = options?.stream ? rest.length - cutCharacterLength(rest) : rest.length;
    this.cut = end < rest.length ? Buffer.from(rest.subarray(end)) : undefined;
    const whole = rest.subarray(0, end);
    // (Checked natively first: a chunk that is all UTF-8, nearly every one, costs no loop over its bytes.)
    return text + (isUtf8(whole) ? this.utf8.decode(whole, { stream: true }) : utf8ElseWindows1252(whole));
  }
}

/**
 * The character `cut` (a chunk's last bytes) began, completed by the first bytes of `chunk`, and the chunk's
 * rest, not copied (every chunk of a UTF-8 file after a cut takes this way). When those bytes do not
 * complete it (invalid, or a chunk shorter than the character's rest), the cut bytes go back before the
 * chunk, to be read with it.
 */
function joinCut(cut: Buffer, chunk: Buffer): { text: string; rest: Buffer } {
  const { length } = utf8Character(cut, 0);
  const joined = Buffer.concat([cut, chunk.subarray(0, length - cut.length)]);
  if (utf8Character(joined, 0).present === length)
    return { text: joined.toString('utf8'), rest: chunk.subarray(length - cut.length) };
  return { text: '', rest: Buffer.concat([cut, chunk]) };
}

/** The text of `bytes`: each UTF-8 character as UTF-8, each other byte as Windows-1252. */
function utf8ElseWindows1252(bytes: Buffer): string {
  let text = '';
  // Where the UTF-8 not yet added to `text` begins.
  let from = 0;
  let at = 0;
  while (at < bytes.length) {
    if (bytes[at]! < 0x80) {
      at += 1;
      continue;
    }
    const { length, present } = utf8Character(bytes, at);
    if (present === length) {
      at += length;
      continue;
    }
    text += bytes.toString('utf8', from, at) + WINDOWS_1252_HIGH.charAt(bytes[at]! - 0x80);
    at += 1;
    from = at;
  }
  return text + bytes.toString('utf8', from);
}

/**
 * Windows-1252's characters for the bytes 0x80 to 0xFF (the five it leaves undefined as C1 controls).
 * (Decoded as a stream, as decode reads Windows-1252 files: Node 20.18.3 and later read a one-shot
 * Windows-1252 decode as ISO-8859-1, 0x80 as U+0080 instead of €; nodejs/node#56542.)
 */
const WINDOWS_1252_HIGH = new TextDecoder('windows-1252').decode(
  Uint8Array.from({ length: 0x80 }, (_, i) => 0x80 + i),
  { stream: true },
);

/** How many bytes at the end of `bytes` begin a UTF-8 character that the end cuts (0 to 3). */
function cutCharacterLength(bytes: Buffer): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back += 1) {
    const byte = bytes[bytes.length - back]!;
    if (byte < 0x80) return 0;
    if (byte >= 0xc0) {
      const { length, present } = utf8Character(bytes, bytes.length - back);
      return present === back && length > back ? back : 0;
    }
  }
  return 0;
}

/**
 * The UTF-8 character that the byte at `at` (not ASCII) begins: its length, and how many of its bytes are
 * in `bytes` as UTF-8 allows them (0 when that byte begins none); it is whole when both are equal.
 */
function utf8Character(bytes: Buffer, at: number): { length: number; present: number } {
  const lead = utf8Lead(bytes[at]!);
  if (!lead) return { length: 1, present: 0 };
  const [length, low, high] = lead;
  let present = 1;
  while (present < length && at + present < bytes.length) {
    const next = bytes[at + present]!;
    if (present === 1 ? next < low || next > high : next < 0x80 || next > 0xbf) break;
    present += 1;
  }
  return { length, present };
}

/**
 * A UTF-8 lead byte's character length and the range of the byte after it, as WHATWG decoders allow them
 * (no overlong form, surrogate or code point past U+10FFFF); undefined for a byte that begins none.
 */
function utf8Lead(byte: number): [length: number, low: number, high: number] | undefined {
  if (byte >= 0xc2 && byte <= 0xdf) return [2, 0x80, 0xbf];
  if (byte === 0xe0) return [3, 0xa0, 0xbf];
  if (byte === 0xed) return [3, 0x80, 0x9f];
  if (byte >= 0xe1 && byte <= 0xef) return [3, 0x80, 0xbf];
  if (byte === 0xf0) return [4, 0x90, 0xbf];
  if (byte === 0xf4) return [4, 0x80, 0x8f];
  if (byte >= 0xf1 && byte <= 0xf3) return [4, 0x80, 0xbf];
  return undefined;
}

/**
 * An empty record. Without a prototype, so that a feed's field named like an object member (constructor,
 * toString, __proto__) is a field like any other instead of the member it would find or replace.
 */
function newFields(): RawFields {
  return Object.create(null) as RawFields;
}

function add(fields: RawFields, name: string, value: string | number): void {
  (fields[name] ??= []).push(value);
}

const GOOGLE_NS = 'http://base.google.com/ns/1.0';
/** Core RSS/Atom elements that carry product fields when a feed does not use g: for them. */
const CORE_FIELDS: Record<string, string> = {
  title: 'title',
  description: 'description',
  summary: 'description',
  link: 'link',
};

/**
 * Google Merchant Center XML: RSS 2.0 `<item>`s or Atom `<entry>`s with `g:` fields. Nested groups
 * (`<g:shipping><g:country>`) become dotted names (`shipping.country`); Atom links use their href.
 */
async function* readXml(source: ByteSource): AsyncGenerator<RawRecord> {
  const parser = new SaxesParser({ xmlns: true, position: false });
  const out: RawRecord[] = [];
  let row = 0;
  let fields: RawFields | undefined;
  let depth = 0;
  const path: { name: string | undefined; text: string }[] = [];
  let failed: string | undefined;
  /** The row the first error is in: the item being read, or the next one between items. */
  let failedRow = 0;

  parser.on('opentag', (node) => {
    if (!fields) {
      if (node.local === 'item' || node.local === 'entry') {
        fields = newFields();
        depth = 0;
        row += 1;
      }
      return;
    }
    depth += 1;
    const parent = path[path.length - 1];
    let name: string | undefined;
    if (node.uri === GOOGLE_NS) name = node.local;
    else if (depth === 1 && node.local && Object.hasOwn(CORE_FIELDS, node.local))
      name = CORE_FIELDS[node.local];
    else if (depth === 1 && node.uri === '') name = node.local;
    if (name && depth > 1) name = parent?.name ? `${parent.name}.${name}` : undefined;
    if (name === 'link' && node.local === 'link') {
      const href = node.attributes.href;
      const value = typeof href === 'string' ? href : href?.value;
      if (value) add(fields, 'link', value);
    }
    path.push({ name, text: '' });
  });
  parser.on('text', (text) => {
    const top = path[path.length - 1];
    if (fields && top) top.text += text;
  });
  parser.on('cdata', (text) => {
    const top = path[path.length - 1];
    if (fields && top) top.text += text;
  });
  parser.on('closetag', () => {
    if (!fields) return;
    if (depth === 0) {
      // (saxes reads on after an error, an undefined entity kept as its text: nothing past the error is
      // a product, or what was imported would depend on where the file's chunks happened to end.)
      if (!failed) out.push({ row, fields });
      fields = undefined;
      return;
    }
    const node = path.pop();
    depth -= 1;
    // Markup inside a field (HTML left unescaped in a description, `<b>` in a title) is its text, as a
    // browser shows it: an element that names no field gives its text to the one around it (it was lost,
    // `<g:id>p<b>2</b></g:id>` read as the id `p`).
    const parent = path[path.length - 1];
    if (node && !node.name && parent) {
      parent.text += node.text;
      return;
    }
    const text = node?.text.trim();
    if (node?.name && text) add(fields, node.name, text);
  });
  parser.on('error', (error) => {
    if (failed !== undefined) return;
    failed = error.message;
    failedRow = fields ? row : row + 1;
  });

  for await (const text of decode(source)) {
    parser.write(text);
    yield* out.splice(0);
    if (failed) break;
  }
  if (!failed) parser.close();
  yield* out.splice(0);
  if (failed)
    yield { row: failedRow, error: `The XML is malformed after this point: ${failed}`, fatal: true };
}

/**
 * CSV/TSV with a header row (CSV cells separated by ",", or ";" / "|" when the header uses those; header
 * names lower-cased, spaces as "_"). Repeated columns collect several values; additional image links may
 * also be one comma-separated cell (Merchant Center's TSV convention). Rows are numbered without the header.
 */
async function* readDelimited(source: ByteSource, tabs: boolean): AsyncGenerator<RawRecord> {
  let header: string[] | undefined;
  let row = 0;
  const texts = decode(source);
  // Spreadsheet exports in many locales separate CSV cells with ";": take the header line's separator.
  let head = '';
  // (Up to the header's line ending, whichever: with LF only, a CR-only file's separator was counted over
  // all its first 64 KB, where commas in "10,50 EUR" could outnumber the header's ";".)
  while (!lineEnd().test(head) && head.length < 65_536) {
    const next = await texts.next();
    if (next.done) break;
    head += next.value;
  }
  const delimiter = tabs ? '\t' : csvDelimiter(firstLine(head));
  const parser = parseCsv({
    delimiter,
    record_delimiter: LINE_ENDINGS,
    bom: true,
    relax_quotes: true,
    relax_column_count: true,
    skip_empty_lines: true,
    trim: true,
  });
  const pump = (async () => {
    if (head && !parser.write(head)) await new Promise((resolve) => parser.once('drain', resolve));
    for await (const text of texts) {
      if (!parser.write(text)) await new Promise((resolve) => parser.once('drain', resolve));
    }
    parser.end();
  })();
  try {
    for await (const record of parser as AsyncIterable<string[]>) {
      if (!header) {
        // (Lower-cased first: a header upper-cased whole, "G:ID", names the id too.)
        header = record.map((name) => name.trim().toLowerCase().replace(/^g:/, '').replace(/\s+/g, '_'));
        continue;
      }
      row += 1;
      const fields = newFields();
      record.forEach((value, i) => {
        const name = header?.[i];
        if (name && value !== '') add(fields, name, value);
      });
      yield { row, fields };
    }
  } catch (error) {
    pump.catch(() => undefined);
    yield {
      row: row + 1,
      error: `The file cannot be read from this row on: ${(error as Error).message}`,
      fatal: true,
    };
    return;
  }
  await pump;
}

/** The CSV separator of a header line: "," unless ";" or "|" occurs more often (outside quotes). */
function csvDelimiter(headerLine: string): string {
  const unquoted = headerLine.replace(/"[^"]*"/g, '');
  const count = (ch: string) => unquoted.split(ch).length - 1;
  const [best] = [',', ';', '|'].sort((a, b) => count(b) - count(a));
  return best && count(best) > 0 ? best : ',';
}

/**
 * A JSON array of product objects, read element by element. Every element is read to its end, strings
 * and nested brackets included, whatever its type: one that is not an object is one row's error, and
 * the array goes on after it. A file that ends before the array's `]` is cut short: a fatal error, so
 * that a full import removes nothing on the strength of it.
 */
async function* readJsonArray(source: ByteSource): AsyncGenerator<RawRecord> {
  let row = 0;
  let started = false;
  /** The array's `]` was read: only whitespace may follow. */
  let closed = false;
  /**
   * Between elements, what may come: an element or the end (after `[`), an element (after `,`), or a
   * separator (after an element). Anything else is not JSON: the file is refused from there on.
   */
  let expect = 'first' as 'first' | 'element' | 'separator';
  /** Bracket depth inside the current element (0: between elements, or inside a scalar element). */
  let depth = 0;
  let inString = false;
  let escaped = false;
  /** The current element's text (kept up to MAX_ELEMENT_CHARS); undefined between elements. */
  let element: string | undefined;
  /** What the element is, from its first character: a string ends at its closing quote. */
  let kind: 'object' | 'string' | 'other' = 'other';
  let oversize = false;
  const append = (ch: string) => {
    if (oversize) return;
    element += ch;
    if (element!.length > MAX_ELEMENT_CHARS) {
      oversize = true;
      element = '';
    }
  };
  const finish = (): RawRecord => {
    row += 1;
    const text = element!;
    element = undefined;
    expect = 'separator';
    if (oversize)
      return { row, error: `The element is longer than ${MAX_ELEMENT_CHARS} characters.`, unreadable: true };
    if (kind === 'object') return parseJsonObject(row, text);
    return isJson(text)
      ? { row, error: 'Expected a product object.' }
      : { row, error: 'Not valid JSON.', unreadable: true };
  };
  const notJson = (what: string): RawRecord => ({
    row: row + 1,
    error: `The JSON array is not valid from this element on (${what}).`,
    fatal: true,
  });
  for await (const text of decode(source)) {
    for (const ch of text) {
      if (closed) {
        // More after the array (a second array, a stray product): the file is not the one array it
        // should be, so it is not read as complete (a full import would remove what follows).
        if (/[ \t\n\r]/.test(ch)) continue;
        yield { row: row + 1, error: 'Content follows the JSON array\'s closing "]".', fatal: true };
        return;
      }
      if (!started) {
        if (ch === '[') started = true;
        else if (!/[ \t\n\r\uFEFF]/.test(ch)) {
          yield { row: 1, error: 'A JSON feed must be an array of product objects.', fatal: true };
          return;
        }
        continue;
      }
      if (element === undefined) {
        // Between elements: JSON's whitespace, then what `expect` allows.
        if (/[ \t\n\r]/.test(ch)) continue;
        if (expect === 'separator') {
          if (ch === ',') expect = 'element';
          else if (ch === ']') closed = true;
          else {
            yield notJson('a missing comma');
            return;
          }
          continue;
        }
        if (ch === ']' && expect === 'first') {
          closed = true;
          continue;
        }
        if (!/[{["\-0-9tfn]/.test(ch)) {
          yield notJson(ch === ',' || ch === ']' ? 'an extra comma' : `"${ch}" where a value starts`);
          return;
        }
        element = '';
        oversize = false;
        kind = ch === '{' ? 'object' : ch === '"' ? 'string' : 'other';
      }
      if (inString) {
        append(ch);
        if (escaped) escaped = false;
        else if (ch === '\\') escaped = true;
        else if (ch === '"') {
          inString = false;
          // A string element ends with its closing quote.
          if (depth === 0 && kind === 'string') yield finish();
        }
        continue;
      }
      if (depth === 0 && kind === 'other' && /[ \t\n\r,\]]/.test(ch)) {
        // The end of a scalar element (a number, true, false, null); the separator is read next.
        yield finish();
        if (ch === ',') expect = 'element';
        else if (ch === ']') closed = true;
        continue;
      }
      append(ch);
      if (ch === '"') inString = true;
      else if (ch === '{' || ch === '[') depth += 1;
      else if (ch === '}' || ch === ']') {
        depth -= 1;
        if (depth === 0) yield finish();
      }
    }
  }
  if (!started || closed) return;
  yield {
    row: row + 1,
    error:
      element !== undefined && (oversize || element.trim() !== '')
        ? 'The JSON array ends in the middle of a product.'
        : 'The JSON array is not closed (no "]"): the file may be cut short.',
    fatal: true,
  };
}

/**
 * JSON Lines: one product object per line, whatever its line ending (LINE_ENDINGS); blank lines are
 * skipped (so a CRLF split between two chunks, read as CR then LF, adds no row).
 */
async function* readJsonLines(source: ByteSource): AsyncGenerator<RawRecord> {
  let row = 0;
  // The pieces of the line being read: each chunk is searched for line ends once, so a long line costs
  // its length, not its length times its chunks.
  let pieces: string[] = [];
  let length = 0;
  const keep = (piece: string) => {
    // Past MAX_ELEMENT_CHARS the line is only counted: it becomes one row's error.
    length += piece.length;
    if (length <= MAX_ELEMENT_CHARS) pieces.push(piece);
    else pieces = [];
  };
  const line = (): RawRecord | undefined => {
    const text = pieces.join('');
    const over = length > MAX_ELEMENT_CHARS;
    pieces = [];
    length = 0;
    if (!over && text.trim() === '') return undefined;
    row += 1;
    return over
      ? { row, error: `The line is longer than ${MAX_ELEMENT_CHARS} characters.`, unreadable: true }
      : parseJsonObject(row, text);
  };
  const ends = lineEnd();
  for await (const text of decode(source)) {
    let start = 0;
    ends.lastIndex = 0;
    for (let end = ends.exec(text); end; end = ends.exec(text)) {
      keep(text.slice(start, end.index));
      start = ends.lastIndex;
      const record = line();
      if (record) yield record;
    }
    if (start < text.length) keep(text.slice(start));
  }
  const record = line();
  if (record) yield record;
}

/**
 * Longest JSON element or line read (a product must stay under 128 KB once normalised, so this is
 * generous): a longer one is one row's error, without being held in memory.
 */
const MAX_ELEMENT_CHARS = 1 << 20;

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** Deepest nesting of a product's JSON values that is read (shipping.price is 2). */
const MAX_JSON_DEPTH = 16;

function parseJsonObject(row: number, text: string): RawRecord {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { row, error: 'Not valid JSON.', unreadable: true };
  }
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return { row, error: 'Expected a product object.' };
  const fields = newFields();
  // Depth-first over nested values; a product nested deeper than MAX_JSON_DEPTH is refused as a row
  // (recursing as deep as the text goes would overflow the stack and fail the whole import).
  let tooDeep = false;
  const put = (name: string, item: unknown, depth: number) => {
    if (item === null || item === undefined || item === '' || tooDeep) return;
    if (depth > MAX_JSON_DEPTH) {
      tooDeep = true;
      return;
    }
    if (typeof item === 'string' || typeof item === 'number') add(fields, name, item);
    else if (typeof item === 'boolean') add(fields, name, String(item));
    else if (Array.isArray(item)) for (const each of item) put(name, each, depth + 1);
    else if (typeof item === 'object') {
      for (const [key, nested] of Object.entries(item as Record<string, unknown>))
        put(`${name}.${key}`, nested, depth + 1);
    }
  };
  for (const [name, item] of Object.entries(value as Record<string, unknown>))
    put(name.replace(/^g:/, ''), item, 1);
  if (tooDeep)
    return { row, error: `Values nested more than ${MAX_JSON_DEPTH} levels deep.`, unreadable: true };
  return { row, fields };
}
