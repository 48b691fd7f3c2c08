import { describe, expect, it } from 'vitest';
import { errorProductId, normaliseRecord, parsePrice, RowError } from '#lib/domain/catalogue/normalise.ts';

describe('parsePrice', () => {
  it.each([
    ['12.99 USD', 1299, 'USD'],
    ['USD 12.99', 1299, 'USD'],
    ['1,299.00 EUR', 129900, 'EUR'],
    ['12,99 EUR', 1299, 'EUR'],
    ['1.299,50 EUR', 129950, 'EUR'],
    ['1500 JPY', 1500, 'JPY'],
    ['1.500 KWD', 1500, 'KWD'],
    ['1.234.567 EUR', 123456700, 'EUR'],
    ['0.125 USD', 13, 'USD'],
    ['7', 700, 'GBP'],
  ])('reads %s as %i %s', (text, cents, currency) => {
    expect(parsePrice(text, 'GBP', 'price')).toEqual({ cents, currency });
  });

  it('takes JSON numbers as whole cents and refuses fractions', () => {
    expect(parsePrice(1299, 'USD', 'price')).toEqual({ cents: 1299, currency: 'USD' });
    expect(() => parsePrice(12.99, 'USD', 'price')).toThrow(RowError);
  });

  it('refuses whole JSON numbers beyond the safe integers (the store cannot hold them exactly)', () => {
    expect(parsePrice(Number.MAX_SAFE_INTEGER, 'USD', 'price').cents).toBe(Number.MAX_SAFE_INTEGER);
    expect(() => parsePrice(1e300, 'USD', 'price')).toThrow(/out of range/);
    expect(() => parsePrice(2 ** 53, 'USD', 'price')).toThrow(/out of range/);
  });

  it('refuses an over-long price before matching it (the pattern backtracks on long runs of spaces)', () => {
    // Matched, this one took seconds (6,000 spaces); refused by its length, it never reaches the pattern.
    expect(() => parsePrice(`1${' '.repeat(6000)}x`, 'USD', 'price')).toThrow(/longer than 64 characters/);
    // Padding is not length: a padded price still parses.
    expect(parsePrice(`${' '.repeat(100)}12.99 USD${' '.repeat(100)}`, 'EUR', 'price')).toEqual({
      cents: 1299,
      currency: 'USD',
    });
    expect(parsePrice('USD 1,234,567,890.00', 'EUR', 'price')).toEqual({
      cents: 123456789000,
      currency: 'USD',
    });
  });

  it('refuses text that is not a price', () => {
    expect(() => parsePrice('free', 'USD', 'price')).toThrow(/not a price/);
  });
});

describe('normaliseRecord', () => {
  const base = { id: ['p1'], title: ['Mug'], image_link: ['/img/p1.jpg'] };

  it('maps Merchant Center names, resolves relative links and parses prices and shipping', () => {
    const content = normaliseRecord(
      {
        ...base,
        link: ['/p/p1'],
        price: ['10.00 USD'],
        sale_price: ['8.00 USD'],
        availability: ['out of stock'],
        google_product_category: ['Home > Kitchen'],
        shipping: ['US:CA:Express:5.00 USD'],
        additional_image_link: ['https://cdn/a.jpg,https://cdn/b.jpg'],
        custom_label_0: ['sale'],
        'metadata.campaign': ['winter'],
        condition: ['New'],
      },
      'https://shop.example/feeds/feed.xml',
    );
    expect(content).toMatchObject({
      product_id: 'p1',
      item_group_id: '',
      image_link: 'https://shop.example/img/p1.jpg',
      link: 'https://shop.example/p/p1',
      price: 1000,
      sale_price: 800,
      currency: 'USD',
      availability: 'out_of_stock',
      category: 'Home > Kitchen',
      shipping_country: 'US',
      shipping_price: 500,
      shipping_currency: 'USD',
      additional_image_links: ['https://cdn/a.jpg', 'https://cdn/b.jpg'],
      metadata: { custom_label_0: 'sale', campaign: 'winter' },
      condition: 'new',
    });
  });

  it('keeps metadata keys named like object members, __proto__ as an own key and never the prototype', () => {
    const content = normaliseRecord(
      { ...base, 'metadata.__proto__': ['p'], 'metadata.constructor': ['c'], 'metadata.campaign': ['w'] },
      'https://s/',
    );
    expect(Object.entries(content.metadata)).toEqual([
      ['__proto__', 'p'],
      ['constructor', 'c'],
      ['campaign', 'w'],
    ]);
    expect(Object.getPrototypeOf(content.metadata)).toBe(Object.prototype);
  });

  it('defaults availability to in_stock and leaves absent prices null', () => {
    const content = normaliseRecord(base, 'https://s/');
    expect(content.availability).toBe('in_stock');
    expect(content.price).toBeNull();
  });

  it("takes a price's missing currency from the other prices or shipping_currency", () => {
    // Act
    const saleWithout = normaliseRecord(
      { ...base, price: ['10.00 USD'], sale_price: ['8.00'] },
      'https://s/',
    );
    const saleOnly = normaliseRecord({ ...base, sale_price: ['8.00 USD'] }, 'https://s/');
    const shippingOwn = normaliseRecord(
      { ...base, price: ['10.00 USD'], shipping_price: ['5.00'], shipping_currency: ['eur'] },
      'https://s/',
    );
    // Assess
    expect(saleWithout).toMatchObject({ price: 1000, sale_price: 800, currency: 'USD' });
    expect(saleOnly).toMatchObject({ price: null, sale_price: 800, currency: 'USD' });
    expect(shippingOwn).toMatchObject({ currency: 'USD', shipping_price: 500, shipping_currency: 'EUR' });
  });

  it('reads schema.org availability, lower-cases gender and age group, and takes offer_id and updated', () => {
    // Act
    const content = normaliseRecord(
      {
        offer_id: ['o1'],
        title: ['Mug'],
        image_link: ['/img/o1.jpg'],
        availability: ['https://schema.org/OutOfStock'],
        gender: ['Female'],
        age_group: ['Adult'],
        updated: ['2026-11-20T10:00:00Z'],
      },
      'https://s/',
    );
    // Assess
    expect(content).toMatchObject({
      product_id: 'o1',
      availability: 'out_of_stock',
      gender: 'female',
      age_group: 'adult',
      product_updated_at: '2026-11-20T10:00:00Z',
    });
  });

  it.each([
    [{ title: ['x'], image_link: ['https://i'] }, /id/],
    [{ id: ['1'], image_link: ['https://i'] }, /title/],
    [{ id: ['1'], title: ['x'] }, /image_link/],
    [{ ...base, availability: ['maybe'] }, /availability/],
    [{ ...base, image_link: ['ftp://x/y.jpg'] }, /http/],
    [{ ...base, price: ['10 USD'], sale_price: ['9 EUR'] }, /currency/],
  ])('refuses %j', (fields, message) => {
    expect(() => normaliseRecord(fields, 'https://s/')).toThrow(message);
  });

  it('refuses an id with a lone surrogate, and keeps other text well-formed', () => {
    const row = (extra: Record<string, string[]>) => ({
      title: ['Lamp'],
      image_link: ['https://cdn.example/l.jpg'],
      ...extra,
    });
    expect(() => normaliseRecord(row({ id: ['\ud800x'] }))).toThrow(RowError);
    expect(() => normaliseRecord(row({ id: ['\ud800x'] }))).toThrow(/lone surrogate/);
    // Elsewhere a lone surrogate becomes U+FFFD, also where a length limit halves a pair.
    const cut = normaliseRecord(
      row({
        id: ['ok'],
        description: ['a\udc00b'],
        title: ['x'.repeat(4999) + '😀'],
        'metadata.note': ['y'.repeat(499) + '😀'],
      }),
    );
    expect(cut.description).toBe('a\ufffdb');
    expect(cut.title.endsWith('\ufffd')).toBe(true);
    expect(cut.metadata['note']!.endsWith('\ufffd')).toBe(true);
    for (const text of [cut.title, cut.description, cut.metadata['note']!])
      expect(() => encodeURIComponent(text)).not.toThrow();
  });

  it('refuses a JSON number as id whose digits it cannot keep (past 2^53, or a fraction)', () => {
    const row = (id: number) => ({ id: [id], title: ['Lamp'], image_link: ['https://cdn.example/l.jpg'] });
    // Read as numbers, 12345678901234567890 and 12345678901234567891 were both the id "12345678901234567000"
    // (the second a duplicate of the first, or another product's update), and 0.10 was "0.1".
    const read = JSON.parse('[12345678901234567890, 12345678901234567891, 0.10, 1e309]') as number[];
    for (const id of [...read, 2 ** 53])
      expect(() => normaliseRecord(row(id))).toThrow(/id \(product_id\) as a JSON number/);
    expect(normaliseRecord(row(Number.MAX_SAFE_INTEGER)).product_id).toBe('9007199254740991');
    expect(normaliseRecord(row(42)).product_id).toBe('42');
  });

  it("names a refused row's id in its error as stored text: bounded and well-formed", () => {
    expect(errorProductId('sku-1')).toBe('sku-1');
    expect(errorProductId(42)).toBe('42');
    expect(errorProductId('\ud800x')).toBe('\ufffdx');
    const long = errorProductId('x'.repeat(1_000_000));
    expect(long).toHaveLength(200);
    expect(long.endsWith('…')).toBe(true);
  });

  it('refuses ids too long for a stored object key once URL-encoded', () => {
    // 26 CJK characters are 234 URL-encoded ones (9 each), 27 are 243: over the 240 that one file name holds
    expect(normaliseRecord({ ...base, id: ['品'.repeat(26)] }, 'https://s/').product_id).toHaveLength(26);
    expect(() => normaliseRecord({ ...base, id: ['品'.repeat(27)] }, 'https://s/')).toThrow(/URL-encoded/);
    expect(() => normaliseRecord({ ...base, id: ['%'.repeat(81)] }, 'https://s/')).toThrow(/URL-encoded/);
  });

  it('refuses an item_group_id longer than an id may be (it keys an index of the product store)', () => {
    const group = (id: string) =>
      normaliseRecord({ ...base, item_group_id: [id] }, 'https://s/').item_group_id;
    expect(group('😀'.repeat(100))).toHaveLength(200);
    expect(() => group('g'.repeat(201))).toThrow(RowError);
    expect(() => group('g'.repeat(201))).toThrow('item_group_id is longer than 200 characters.');
  });

  it('notes each metadata field it leaves out for its name, and none for an empty value', () => {
    // Prepare
    const notes: string[] = [];
    const fields = {
      ...base,
      'metadata.Campaign Name': ['winter'],
      'metadata.a.b': ['y'],
      [`metadata.${'n'.repeat(65)}`]: ['z'],
      'metadata.blank': [''],
      'metadata.kept': ['yes'],
    };
    // Act
    const content = normaliseRecord(fields, 'https://s/', notes);
    // Assess
    expect(content.metadata).toEqual({ kept: 'yes' });
    const rule = 'is not kept: a metadata name is 1–64 letters, digits, "_" or "-".';
    expect(notes).toEqual([
      `metadata "Campaign Name" ${rule}`,
      `metadata "a.b" ${rule}`,
      `metadata "${'n'.repeat(59)}…" ${rule}`,
    ]);
  });

  it('bounds what one product stores: highlights, metadata fields and additional images are capped', () => {
    // Prepare: far more of each than a product keeps
    const fields = {
      ...base,
      product_highlight: Array.from({ length: 150 }, (_, i) => `${i} ${'h'.repeat(1000)}`),
      additional_image_link: Array.from({ length: 3000 }, (_, i) => `https://cdn/${i}.jpg`),
      ...Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`metadata.k${i}`, ['v']])),
    };
    const notes: string[] = [];
    // Act
    const content = normaliseRecord(fields, 'https://s/', notes);
    // Assess
    expect(notes).toEqual(['metadata fields past the 100th are not kept.']);
    expect(content.product_highlight).toHaveLength(100);
    expect(content.product_highlight.every((h) => h.length === 500)).toBe(true);
    expect(content.additional_image_links).toEqual(
      Array.from({ length: 10 }, (_, i) => `https://cdn/${i}.jpg`),
    );
    expect(Object.keys(content.metadata)).toHaveLength(100);
    expect(content.metadata.k0).toBe('v');
  });

  it('refuses a product whose fields add up to more than the store takes, and over-long links', () => {
    // 23 text fields of 5000 three-byte characters: ~345 KB as JSON
    const big = Object.fromEntries(
      ['description', 'short_title', 'brand', 'color', 'material', 'size', 'gtin', 'mpn', 'product_type'].map(
        (name) => [name, ['€'.repeat(5000)]],
      ),
    );
    expect(() => normaliseRecord({ ...base, ...big }, 'https://s/')).toThrow(/more than 128 KB/);
    expect(() =>
      normaliseRecord({ ...base, image_link: [`https://cdn/${'a'.repeat(3000)}.jpg`] }, 'https://s/'),
    ).toThrow(/longer than 2048/);
  });
});
