import { describe, expect, it } from 'vitest';
import {
  headText,
  readFeed,
  sniffFormat,
  type FeedFormat,
  type RawRecord,
} from '#lib/domain/catalogue/feed-formats.ts';

async function read(text: string, format: FeedFormat, chunk = 7): Promise<RawRecord[]> {
  // Small chunks so records and multi-byte characters straddle chunk boundaries.
  const bytes = Buffer.from(text);
  async function* source() {
    for (let i = 0; i < bytes.length; i += chunk) yield bytes.subarray(i, i + chunk);
  }
  const out: RawRecord[] = [];
  for await (const record of readFeed(source(), format)) out.push(record);
  return out;
}

const RSS = `<?xml version="1.0"?>
<rss version="2.0" xmlns:g="http://base.google.com/ns/1.0"><channel><title>Shop</title><link>https://shop.example</link>
<item><g:id>A1</g:id><title>Mug — blue</title><link>https://shop.example/a1</link><g:price>12.99 USD</g:price>
<g:additional_image_link>https://x/1.jpg</g:additional_image_link><g:additional_image_link>https://x/2.jpg</g:additional_image_link>
<g:shipping><g:country>US</g:country><g:price>4.95 USD</g:price></g:shipping><description><![CDATA[<b>Big</b> mug]]></description></item>
<item><g:id>A2</g:id><title>Cup</title></item>
</channel></rss>`;

describe('readFeed', () => {
  it('reads Merchant Center RSS items with g: fields, repeated and nested elements', async () => {
    // Prepare / Act
    const records = await read(RSS, 'xml');
    // Assess
    expect(records).toHaveLength(2);
    expect(records[0]).toEqual({
      row: 1,
      fields: {
        id: ['A1'],
        title: ['Mug — blue'],
        link: ['https://shop.example/a1'],
        price: ['12.99 USD'],
        additional_image_link: ['https://x/1.jpg', 'https://x/2.jpg'],
        'shipping.country': ['US'],
        'shipping.price': ['4.95 USD'],
        description: ['<b>Big</b> mug'],
      },
    });
    expect(records[1]).toEqual({ row: 2, fields: { id: ['A2'], title: ['Cup'] } });
  });

  it('reads Atom entries, taking the link from href and ignoring the entry id', async () => {
    const atom = `<feed xmlns="http://www.w3.org/2005/Atom" xmlns:g="http://base.google.com/ns/1.0">
      <entry><id>tag:x</id><g:id>B1</g:id><title>Lamp</title><link href="https://shop/b1"/></entry></feed>`;
    const records = await read(atom, 'xml');
    expect(records).toEqual([{ row: 1, fields: { id: ['B1'], title: ['Lamp'], link: ['https://shop/b1'] } }]);
  });

  it('reads markup inside a field as its text, in order, and keeps nested g: fields apart', async () => {
    // Prepare: HTML left unescaped in a description and an id; a shipping block's own fields
    const xml = `<rss xmlns:g="http://base.google.com/ns/1.0"><channel><item><g:id>p<b>2</b>x</g:id>
<description>A <b>big</b> <i>blue <u>mug</u></i>.</description>
<g:shipping><g:country>US</g:country><g:price>4.95 USD</g:price></g:shipping></item></channel></rss>`;
    // Act
    const [record] = await read(xml, 'xml');
    // Assess
    expect(record).toMatchObject({
      fields: {
        id: ['p2x'],
        description: ['A big blue mug.'],
        'shipping.country': ['US'],
        'shipping.price': ['4.95 USD'],
      },
    });
    expect(Object.keys((record as { fields: object }).fields)).not.toContain('shipping');
  });

  it("reads an Atom entry's summary as its description", async () => {
    // Prepare
    const atom = `<feed xmlns="http://www.w3.org/2005/Atom" xmlns:g="http://base.google.com/ns/1.0">
      <entry><g:id>B2</g:id><title>Lamp</title><summary>Brass lamp</summary></entry></feed>`;
    // Act
    const records = await read(atom, 'xml');
    // Assess
    expect(records).toEqual([
      { row: 1, fields: { id: ['B2'], title: ['Lamp'], description: ['Brass lamp'] } },
    ]);
  });

  it('ends malformed XML with a fatal error after the readable items', async () => {
    const records = await read(
      `<rss xmlns:g="http://base.google.com/ns/1.0"><channel><item><g:id>1</g:id></item><item><g:id>2</g:i`,
      'xml',
    );
    expect(records[0]).toEqual({ row: 1, fields: { id: ['1'] } });
    expect(records.at(-1)).toMatchObject({ fatal: true });
  });

  it('ends XML at the item with an error, whatever the chunks: nothing after it is a product', async () => {
    // An undefined entity (HTML's &nbsp;, which XML lacks) in item 2: saxes reads on, keeping its text
    const xml = `<rss xmlns:g="http://base.google.com/ns/1.0"><channel>
      <item><g:id>e1</g:id><title>One</title></item>
      <item><g:id>e2</g:id><title>Two&nbsp;x</title></item>
      <item><g:id>e3</g:id><title>Three</title></item></channel></rss>`;
    for (const chunk of [7, 64, 100_000]) {
      const records = await read(xml, 'xml', chunk);
      expect(records, `chunks of ${chunk}`).toEqual([
        { row: 1, fields: { id: ['e1'], title: ['One'] } },
        { row: 2, error: 'The XML is malformed after this point: undefined entity.', fatal: true },
      ]);
    }
  });

  it('reads CSV with a header, quoted cells and repeated columns', async () => {
    const csv =
      'id,title,price,product_highlight,product_highlight\n1,"Chair, oak",10 EUR,Solid,Light\n\n2,Table,,,\n';
    const records = await read(csv, 'csv');
    expect(records).toEqual([
      {
        row: 1,
        fields: {
          id: ['1'],
          title: ['Chair, oak'],
          price: ['10 EUR'],
          product_highlight: ['Solid', 'Light'],
        },
      },
      { row: 2, fields: { id: ['2'], title: ['Table'] } },
    ]);
  });

  it('reads TSV and strips g: prefixes from the header', async () => {
    const records = await read('g:id\tg:title\n7\tSofa\n', 'tsv');
    expect(records).toEqual([{ row: 1, fields: { id: ['7'], title: ['Sofa'] } }]);
  });

  it('reads a JSON array element by element, flattening metadata objects', async () => {
    const json =
      '[{"product_id":"p1","price":1299,"metadata":{"campaign":"x"},"t":"a}b"},\n 5, {"product_id":"p2"}]';
    const records = await read(json, 'json');
    expect(records).toEqual([
      { row: 1, fields: { product_id: ['p1'], price: [1299], 'metadata.campaign': ['x'], t: ['a}b'] } },
      { row: 2, error: 'Expected a product object.' },
      { row: 3, fields: { product_id: ['p2'] } },
    ]);
  });

  it('refuses a product nested deeper than it reads as a row, and reads on', async () => {
    // Prepare: 20,000 levels of arrays and of objects (recursing that deep would overflow the stack)
    const deepArray = `{"id":"d","x":${'['.repeat(20_000)}1${']'.repeat(20_000)}}`;
    const deepObject = `{"id":"o","x":${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}}`;
    // Act
    const records = await read(
      `${deepArray}\n${deepObject}\n{"id":"ok","s":{"price":"1 USD"}}`,
      'jsonl',
      4096,
    );
    // Assess
    expect(records).toEqual([
      { row: 1, error: 'Values nested more than 16 levels deep.', unreadable: true },
      { row: 2, error: 'Values nested more than 16 levels deep.', unreadable: true },
      { row: 3, fields: { id: ['ok'], 's.price': ['1 USD'] } },
    ]);
  });

  it('reads JSON Lines and reports a broken line without stopping', async () => {
    const records = await read('{"id":"1"}\n{oops\n\n{"id":"3"}', 'jsonl');
    expect(records).toEqual([
      { row: 1, fields: { id: ['1'] } },
      { row: 2, error: 'Not valid JSON.', unreadable: true },
      { row: 3, fields: { id: ['3'] } },
    ]);
  });
});

describe('readFeed against hostile files (a fuzzing review)', () => {
  const fieldsOf = (records: RawRecord[]) =>
    records.map((record) => ('fields' in record ? { ...record.fields } : record));

  it('reads fields named like object members (constructor, toString, __proto__) in every format', async () => {
    const names = ['constructor', 'toString', '__proto__', 'hasOwnProperty'];
    const json = `{"id":"p1",${names.map((name) => `"${name}":"v"`).join(',')}}`;
    const xml = `<rss xmlns:g="http://base.google.com/ns/1.0"><channel><item><g:id>p1</g:id>${names
      .map((name) => `<g:${name}>v</g:${name}>`)
      .join('')}<constructor>v</constructor></item></channel></rss>`;
    const csv = `id,${names.join(',')}\np1,v,v,v,v\n`;
    for (const [text, format] of [
      [`[${json}]`, 'json'],
      [`${json}\n`, 'jsonl'],
      [xml, 'xml'],
      [csv, 'csv'],
    ] as const) {
      const [record, ...more] = await read(text, format);
      expect(more, format).toEqual([]);
      expect(record && 'fields' in record, format).toBe(true);
      const fields = (record as { fields: Record<string, unknown[]> }).fields;
      expect(fields['id'], format).toEqual(['p1']);
      for (const name of names) {
        // The XML item also has a plain <constructor> element (not a core RSS field): a second value.
        const values = format === 'xml' && name === 'constructor' ? ['v', 'v'] : ['v'];
        // CSV header names are lower-cased.
        const key = format === 'csv' ? name.toLowerCase() : name;
        expect(Object.hasOwn(fields, key) && fields[key], `${format} ${name}`).toEqual(values);
      }
    }
  });

  it('reads a JSON array to its end past string and array elements holding "]", each one row', async () => {
    const text = '[{"id":"p1"}, "a]b,c", [1, [2]], 42, {"id":"p2","note":"x]y"}, true, {"id":"p3"}]';

    const records = await read(text, 'json');

    expect(fieldsOf(records)).toEqual([
      { id: ['p1'] },
      { row: 2, error: 'Expected a product object.' },
      { row: 3, error: 'Expected a product object.' },
      { row: 4, error: 'Expected a product object.' },
      { id: ['p2'], note: ['x]y'] },
      { row: 6, error: 'Expected a product object.' },
      { id: ['p3'] },
    ]);
    expect(records.map((record) => record.row)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('ends a JSON array cut short (no "]") with a fatal error after what it read', async () => {
    for (const cut of [
      '[{"id":"p1"},{"id":"p2"}',
      '[{"id":"p1"},{"id":"p2"},',
      '[{"id":"p1"},{"id":"p2"},{"id"',
    ]) {
      const records = await read(cut, 'json');
      expect(
        records.slice(0, 2).map((record) => 'fields' in record && record.fields['id']),
        cut,
      ).toEqual([['p1'], ['p2']]);
      expect(records[2], cut).toMatchObject({ row: 3, fatal: true });
      expect(records, cut).toHaveLength(3);
    }
    // A complete array is read to its end without one, trailing whitespace included.
    expect((await read('[{"id":"p1"}]\n \n', 'json')).some((record) => 'fatal' in record)).toBe(false);
  });

  it('ends a JSON array that stops being JSON (missing, extra or trailing commas, comments) with a fatal error', async () => {
    for (const text of [
      '[{"id":"p1"} {"id":"p2"}]',
      '[{"id":"p1"},,{"id":"p2"}]',
      '[{"id":"p1"},]',
      '[{"id":"p1"}, /* c */ {"id":"p2"}]',
      '[{"id":"p1"}, 1 2]',
    ]) {
      const records = await read(text, 'json', 3);
      expect(records[0], text).toMatchObject({ row: 1, fields: { id: ['p1'] } });
      expect(records.at(-1), text).toMatchObject({ fatal: true });
      expect(
        records.some((record) => 'fields' in record && record.fields['id']?.[0] === 'p2'),
        text,
      ).toBe(false);
    }
    // Valid JSON with JSON's whitespace anywhere between elements reads whole, an empty array too.
    // An element that is JSON but not a product reads; one that is not JSON is unreadable.
    expect(await read('[null, tru, {"id":"p1"}]', 'json')).toEqual([
      { row: 1, error: 'Expected a product object.' },
      { row: 2, error: 'Not valid JSON.', unreadable: true },
      { row: 3, fields: { id: ['p1'] } },
    ]);
    expect(fieldsOf(await read('[\n\t{"id":"p1"}\r\n ,\n 1 ,"x"\n]\n', 'json', 2))).toEqual([
      { id: ['p1'] },
      { row: 2, error: 'Expected a product object.' },
      { row: 3, error: 'Expected a product object.' },
    ]);
    expect(await read(' [ ] ', 'json')).toEqual([]);
  });

  it('ends a JSON file with more after its array (a second array, a stray object) with a fatal error', async () => {
    for (const text of ['[{"id":"p1"}]\n[{"id":"p2"}]', '[{"id":"p1"}] {"id":"p2"}', '[1]x']) {
      const records = await read(text, 'json', 2);
      expect(records.at(-1), text).toMatchObject({ fatal: true });
      expect(
        records.filter((record) => 'fields' in record && record.fields['id']?.[0] === 'p2'),
        text,
      ).toEqual([]);
    }
  });

  it('reads each CSV/TSV line as its own row whatever its line ending, mixed in one file', async () => {
    for (const [text, format] of [
      ['id,title\r\np1,A\np2,B\rp3,C\r\n', 'csv'],
      ['id,title\np1,A\r\np2,B\r\np3,C', 'csv'],
      ['id\ttitle\rp1\tA\np2\tB\np3\tC\n', 'tsv'],
    ] as const) {
      const records = await read(text, format, 3);
      expect(fieldsOf(records), JSON.stringify(text)).toEqual([
        { id: ['p1'], title: ['A'] },
        { id: ['p2'], title: ['B'] },
        { id: ['p3'], title: ['C'] },
      ]);
    }
  });

  it('reads each JSON Lines line as its own row whatever its line ending, mixed in one file', async () => {
    // CR alone (old Mac files) once ended no line: the whole file was one line, one row error.
    for (const text of [
      '{"id":"p1"}\r{"id":"p2"}\r{"id":"p3"}\r',
      '{"id":"p1"}\r\n{"id":"p2"}\r\n{"id":"p3"}',
      '{"id":"p1"}\n{"id":"p2"}\r{"id":"p3"}\r\n\r\n',
    ]) {
      // Chunks of 1, 3 and 12 characters split CRLFs between chunks.
      for (const chunk of [1, 3, 12]) {
        const records = await read(text, 'jsonl', chunk);
        expect(records, `${JSON.stringify(text)} ${chunk}`).toEqual([
          { row: 1, fields: { id: ['p1'] } },
          { row: 2, fields: { id: ['p2'] } },
          { row: 3, fields: { id: ['p3'] } },
        ]);
      }
    }
  });

  it('takes the CSV separator from the header line alone whatever its line ending', async () => {
    // With CR-only endings the "header line" was the file's first 64 KB: the rows' commas won over ";".
    const csv = 'id;title;price\r1;Chair, oak, tall;10,50 EUR\r2;Table, pine, long;3,50 EUR\r';
    expect(fieldsOf(await read(csv, 'csv', 4))).toEqual([
      { id: ['1'], title: ['Chair, oak, tall'], price: ['10,50 EUR'] },
      { id: ['2'], title: ['Table, pine, long'], price: ['3,50 EUR'] },
    ]);
  });

  it('makes an element or line over a megabyte one row error, without holding it, and reads on', async () => {
    const huge = 'x'.repeat(1_100_000);
    const json = await read(`[{"id":"p1","d":"${huge}"}, "${huge}", {"id":"p2"}]`, 'json', 65_536);
    expect(fieldsOf(json)).toEqual([
      { row: 1, error: expect.stringMatching(/longer than 1048576 characters/), unreadable: true },
      { row: 2, error: expect.stringMatching(/longer than 1048576 characters/), unreadable: true },
      { id: ['p2'] },
    ]);
    for (const end of ['\n', '\r']) {
      const jsonl = await read(`{"id":"p1","d":"${huge}"}${end}{"id":"p2"}${end}`, 'jsonl', 65_536);
      expect(fieldsOf(jsonl), JSON.stringify(end)).toEqual([
        { row: 1, error: expect.stringMatching(/longer than 1048576 characters/), unreadable: true },
        { id: ['p2'] },
      ]);
    }
  });

  it('reads an element of many strings (not an object) as one row error, and the product after it', async () => {
    // (Once, every closing quote in such an element re-copied it: 300 KB of "" took 7.8 s.)
    const hostile = `[[${'"",'.repeat(150_000)}""], {"id":"p1"}]`;
    const records = await read(hostile, 'json', 65_536);
    expect(fieldsOf(records)).toEqual([{ row: 1, error: 'Expected a product object.' }, { id: ['p1'] }]);
  });

  it('reads a JSON Lines line longer than many chunks whole', async () => {
    const long = 'x'.repeat(100_000);
    const records = await read(`{"id":"p1","description":"${long}"}\n{"id":"p2"}\n`, 'jsonl', 1000);
    expect(fieldsOf(records)).toEqual([{ id: ['p1'], description: [long] }, { id: ['p2'] }]);
  });
});

/** An RSS feed in ISO-8859-2, as its declaration says: the id Łódź, which Windows-1252 reads as £ód¼. */
const LATIN2_XML = Buffer.concat([
  Buffer.from(
    '<?xml version="1.0" encoding="ISO-8859-2"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>' +
      '<item><g:id>',
  ),
  Buffer.from([0xa3, 0xf3, 0x64, 0xbc]),
  Buffer.from('</g:id></item></channel></rss>'),
]);

describe('readFeed encodings', () => {
  /** Reads `bytes` in chunks of 7 bytes. */
  async function readBytes(bytes: Buffer, format: FeedFormat): Promise<RawRecord[]> {
    async function* source() {
      for (let i = 0; i < bytes.length; i += 7) yield bytes.subarray(i, i + 7);
    }
    const out: RawRecord[] = [];
    for await (const record of readFeed(source(), format)) out.push(record);
    return out;
  }
  const idsOf = (records: RawRecord[]) => records.map((r) => ('fields' in r ? r.fields.id?.[0] : undefined));

  it('reads a Latin-1 file (a spreadsheet export) as Windows-1252, not as U+FFFD', async () => {
    // Prepare: café and cafè, two products, in one byte per letter
    const csv = Buffer.from('id,title\ncafé,Café mug\ncafè,Cafè cup\n', 'latin1');
    // Act / Assess
    expect(idsOf(await readBytes(csv, 'csv'))).toEqual(['café', 'cafè']);
  });

  it('reads XML in the encoding its declaration names, and UTF-16 by its byte-order mark', async () => {
    // ISO-8859-2: Ł ó d ź, which Windows-1252 reads as £ ó d ¼
    const xml = LATIN2_XML;
    expect(idsOf(await readBytes(xml, 'xml'))).toEqual(['Łódź']);
    // UTF-8 under an ISO-8859-1 declaration (a common mislabel) is UTF-8: Latin-1 is hardly ever valid UTF-8
    const mislabelled = Buffer.from(
      '<?xml version="1.0" encoding="ISO-8859-1"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>' +
        '<item><g:id>café</g:id></item></channel></rss>',
    );
    expect(idsOf(await readBytes(mislabelled, 'xml'))).toEqual(['café']);
    const utf16 = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('[{"id":"grüß"}]', 'utf16le')]);
    expect(idsOf(await readBytes(utf16, 'json'))).toEqual(['grüß']);
    expect(sniffFormat(headText(utf16))).toBe('json');
  });

  it('tells UTF-8 from Latin-1 whatever the chunks: a character cut at a chunk end is no evidence', async () => {
    // Prepare: the first letter that is not ASCII first in a chunk whose end cuts another (UTF-8), last
    // in a chunk (UTF-8, told with the next chunk), and last in the file (Latin-1)
    const chunked = async (chunks: Buffer[]) => {
      async function* source() {
        yield* chunks;
      }
      const out: RawRecord[] = [];
      for await (const record of readFeed(source(), 'csv')) out.push(record);
      return idsOf(out);
    };
    const e = [0xc3, 0xa9];
    // Act / Assess
    expect(
      await chunked([Buffer.from('id\nx'), Buffer.from([...e, ...e, e[0]!]), Buffer.from([e[1]!, 0x0a])]),
    ).toEqual(['xééé']);
    expect(await chunked([Buffer.from('id\nx'), Buffer.from([e[0]!]), Buffer.from([e[1]!, 0x0a])])).toEqual([
      'xé',
    ]);
    expect(await chunked([Buffer.from('id\nx'), Buffer.from([0xe9])])).toEqual(['xé']);
    // An XML declaration naming UTF-16 without a byte-order mark is read as the bytes say
    const xml = Buffer.from(
      '<?xml version="1.0" encoding="UTF-16"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>' +
        '<item><g:id>naïve</g:id></item></channel></rss>',
    );
    expect(idsOf(await readBytes(xml, 'xml'))).toEqual(['naïve']);
  });

  it('reads the declaration a chunk end cuts, its rest in the chunk of the first letter not ASCII', async () => {
    // Prepare: ISO-8859-2's Łódź (Windows-1252: £ód¼), the declaration cut after `encod`
    const xml = LATIN2_XML;
    const cut = xml.indexOf('ing=');
    const at = xml.indexOf(0xa3);
    async function* source(chunks: Buffer[]) {
      yield* chunks;
    }
    const read = async (chunks: Buffer[]) => {
      const out: RawRecord[] = [];
      for await (const record of readFeed(source(chunks), 'xml')) out.push(record);
      return idsOf(out);
    };
    // Act / Assess: the letter far from the chunk's end, and near it (held for the next chunk)
    expect(await read([xml.subarray(0, cut), xml.subarray(cut)])).toEqual(['Łódź']);
    expect(await read([xml.subarray(0, cut), xml.subarray(cut, at + 1), xml.subarray(at + 1)])).toEqual([
      'Łódź',
    ]);
  });

  /** The ids of a one-column CSV (`id`) read in these chunks. */
  async function csvIds(chunks: (string | number[])[]): Promise<ReturnType<typeof idsOf>> {
    async function* source() {
      for (const chunk of chunks) yield typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk);
    }
    const out: RawRecord[] = [];
    for await (const record of readFeed(source(), 'csv')) out.push(record);
    return idsOf(out);
  }

  it('reads a later byte that is no UTF-8 in a UTF-8 file as Windows-1252, the rest as UTF-8', async () => {
    // Prepare: a UTF-8 export, then a Latin-1 one put after it (café, cafè), then UTF-8 again; a Latin-1
    // è right before a UTF-8 €, a Latin-1 â (0xE2, a lead byte) before a UTF-8 é, and bytes that only
    // look like UTF-8: a surrogate's (í, no-break space, €) and an overlong / (À¯)
    const csv = Buffer.concat([
      Buffer.from('id,title\ncafé,Café mug\n'),
      Buffer.from('cafè,Cafè cup\n', 'latin1'),
      Buffer.from('thé—€,Tea\n'),
      Buffer.from([0xe8, ...Buffer.from('€,x\n')]),
      Buffer.from([0xe2, ...Buffer.from('é,x\n')]),
      Buffer.from([0x47, 0xed, 0xa0, 0x80, 0x0a, 0x48, 0xc0, 0xaf, 0x0a]),
    ]);
    // Act / Assess
    expect(idsOf(await readBytes(csv, 'csv'))).toEqual([
      'café',
      'cafè',
      'thé—€',
      'è€',
      'âé',
      'Gí\u00a0€',
      'HÀ¯',
    ]);
  });

  it('reads UTF-8 and the bytes that are not whatever chunk ends cut them', async () => {
    // Act / Assess: the file told UTF-8 by its first letter; then € cut after 1 and 2 bytes, a Latin-1 é
    // (a lead byte) cut before the line end, € cut before a byte that cannot go on it (so â‚ then D), an
    // emoji over three chunks, and a lead byte the file's end cuts
    expect(
      await csvIds([
        'id\né\n',
        [0x41, 0xe2],
        [0x82, 0xac, 0x0a],
        [0x41, 0xe2, 0x82],
        [0xac, 0x0a, 0x42, 0xe9],
        '\n',
        [0x43, 0xe2, 0x82],
        'D\n',
        [0x45, 0xf0, 0x9f],
        [0x98],
        [0x80, 0x0a, 0x46, 0xc3],
      ]),
    ).toEqual(['é', 'A€', 'A€', 'Bé', 'Câ‚D', 'E😀', 'FÃ']);
  });

  it('reads the same UTF-8 and Windows-1252 text in chunks of any size', async () => {
    // Prepare: a JSON Lines id of UTF-8 letters (2, 3 and 4 bytes), ASCII and Latin-1 letters of 0xE0 and
    // up (each a lead byte that nothing after it here continues: no accidental UTF-8), in a seeded order,
    // after ten é that tell UTF-8 (the first chunk that is not ASCII decides, to its end)
    const pieces: [Buffer, string][] = [
      ...['é', '€', '😀', 'ß', 'a', '-'].map((text): [Buffer, string] => [Buffer.from(text), text]),
      ...'àéèïôùÿñ'.split('').map((text): [Buffer, string] => [Buffer.from(text, 'latin1'), text]),
    ];
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    const picked = Array.from({ length: 400 }, () => pieces[next() % pieces.length]!);
    const id = 'é'.repeat(10) + picked.map(([, text]) => text).join('');
    const bytes = Buffer.concat([
      Buffer.from(`{"id":"${'é'.repeat(10)}`),
      ...picked.map(([piece]) => piece),
      Buffer.from('"}\n'),
    ]);
    for (const size of [1, 2, 3, 5, 8, 13]) {
      async function* source() {
        for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
      }
      const out: RawRecord[] = [];
      // Act
      for await (const record of readFeed(source(), 'jsonl')) out.push(record);
      // Assess
      expect(idsOf(out), `chunks of ${size}`).toEqual([id]);
    }
  });

  it('reads UTF-16 without a byte-order mark by the NULs beside its first ASCII letters', async () => {
    // Prepare: JSON in UTF-16LE, XML in UTF-16BE, and a CSV in UTF-16LE read one byte a chunk
    const json = Buffer.from('[{"id":"grüß"}]', 'utf16le');
    const xml = Buffer.from(
      '<?xml version="1.0"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>' +
        '<item><g:id>naïve €</g:id></item></channel></rss>',
      'utf16le',
    ).swap16();
    const csv = Buffer.from('id\ncafé\n', 'utf16le');
    // Act / Assess
    expect(idsOf(await readBytes(json, 'json'))).toEqual(['grüß']);
    expect(idsOf(await readBytes(xml, 'xml'))).toEqual(['naïve €']);
    expect(await csvIds([...csv].map((byte) => [byte]))).toEqual(['café']);
    expect(sniffFormat(headText(json))).toBe('json');
    expect(sniffFormat(headText(xml))).toBe('xml');
  });

  it('keeps a file told Windows-1252 in Windows-1252, and U+FFFD in a file that declares UTF-8', async () => {
    // Prepare: a Latin-1 first letter, then what would be UTF-8 (é as 0xC3 0xA9: Ã© in Windows-1252)
    const latin1 = Buffer.concat([Buffer.from('id\ncafé\n', 'latin1'), Buffer.from('thé\n')]);
    // An XML file declaring UTF-8 with a Latin-1 è after a UTF-8 é: the declaration is taken at its word
    const declared = Buffer.concat([
      Buffer.from(
        '<?xml version="1.0" encoding="UTF-8"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>' +
          '<item><g:id>é</g:id></item><item><g:id>',
      ),
      Buffer.from([0xe8]),
      Buffer.from('</g:id></item></channel></rss>'),
    ]);
    // Act / Assess
    expect(idsOf(await readBytes(latin1, 'csv'))).toEqual(['café', 'thÃ©']);
    expect(idsOf(await readBytes(declared, 'xml'))).toEqual(['é', '\uFFFD']);
  });
});

describe('sniffFormat', () => {
  it.each([
    ['<?xml version="1.0"?><rss>', 'xml'],
    // Without a prolog, and after a byte order mark
    ['<rss version="2.0">', 'xml'],
    ['\uFEFF<?xml version="1.0"?><rss>', 'xml'],
    ['\uFEFF[{"id":1}]', 'json'],
    ['  [{"id":1}]', 'json'],
    ['{"id":1}\n', 'jsonl'],
    ['id\ttitle\n', 'tsv'],
    ['id,title\n', 'csv'],
    // The first line ends at a lone CR too: a tab in a later row does not make the file TSV.
    ['id,title\rp1,"A\tB"\r', 'csv'],
    ['id\ttitle\rp1\tA\r', 'tsv'],
  ])('recognises %j as %s', (head, format) => {
    expect(sniffFormat(head)).toBe(format);
  });
});

describe('readFeed CSV dialects', () => {
  it('takes ";" as the separator when the header uses it, and normalises header names', async () => {
    const csv = 'ID;Title;Image Link;Price\n1;"Chair; oak";https://x/1.jpg;10,50 EUR\n';
    const records = await read(csv, 'csv', 3);
    expect(records).toEqual([
      {
        row: 1,
        fields: { id: ['1'], title: ['Chair; oak'], image_link: ['https://x/1.jpg'], price: ['10,50 EUR'] },
      },
    ]);
  });

  it('strips the g: prefix of a header name whatever its case, as the names are case-insensitive', async () => {
    // Prepare: a spreadsheet that upper-cased its header row
    const csv = 'G:ID,G:Title,G:Image Link\n1,Chair,https://x/1.jpg\n';
    // Act
    const records = await read(csv, 'csv', 3);
    // Assess: before, "G:ID" was read as the field g:id, and no row had an id
    expect(records).toEqual([
      { row: 1, fields: { id: ['1'], title: ['Chair'], image_link: ['https://x/1.jpg'] } },
    ]);
  });

  it('takes "|" as the separator when the header uses it', async () => {
    // Prepare
    const csv = 'id|title|price\n1|Chair, oak|10.50 EUR\n';
    // Act
    const records = await read(csv, 'csv', 3);
    // Assess
    expect(records).toEqual([{ row: 1, fields: { id: ['1'], title: ['Chair, oak'], price: ['10.50 EUR'] } }]);
  });
});
