import { describe, expect, it } from 'vitest';
import {
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

  it('ends malformed XML with a fatal error after the readable items', async () => {
    const records = await read(
      `<rss xmlns:g="http://base.google.com/ns/1.0"><channel><item><g:id>1</g:id></item><item><g:id>2</g:i`,
      'xml',
    );
    expect(records[0]).toEqual({ row: 1, fields: { id: ['1'] } });
    expect(records.at(-1)).toMatchObject({ fatal: true });
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
      { row: 1, error: 'Values nested more than 16 levels deep.' },
      { row: 2, error: 'Values nested more than 16 levels deep.' },
      { row: 3, fields: { id: ['ok'], 's.price': ['1 USD'] } },
    ]);
  });

  it('reads JSON Lines and reports a broken line without stopping', async () => {
    const records = await read('{"id":"1"}\n{oops\n\n{"id":"3"}', 'jsonl');
    expect(records).toEqual([
      { row: 1, fields: { id: ['1'] } },
      { row: 2, error: 'Not valid JSON.' },
      { row: 3, fields: { id: ['3'] } },
    ]);
  });
});

describe('sniffFormat', () => {
  it.each([
    ['<?xml version="1.0"?><rss>', 'xml'],
    ['  [{"id":1}]', 'json'],
    ['{"id":1}\n', 'jsonl'],
    ['id\ttitle\n', 'tsv'],
    ['id,title\n', 'csv'],
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
});
