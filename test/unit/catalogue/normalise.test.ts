import { describe, expect, it } from 'vitest';
import { normaliseRecord, parsePrice, RowError } from '#lib/domain/catalogue/normalise.ts';

describe('parsePrice', () => {
  it.each([
    ['12.99 USD', 1299, 'USD'],
    ['USD 12.99', 1299, 'USD'],
    ['1,299.00 EUR', 129900, 'EUR'],
    ['12,99 EUR', 1299, 'EUR'],
    ['1.299,50 EUR', 129950, 'EUR'],
    ['1500 JPY', 1500, 'JPY'],
    ['0.125 USD', 13, 'USD'],
    ['7', 700, 'GBP'],
  ])('reads %s as %i %s', (text, cents, currency) => {
    expect(parsePrice(text, 'GBP', 'price')).toEqual({ cents, currency });
  });

  it('takes JSON numbers as whole cents and refuses fractions', () => {
    expect(parsePrice(1299, 'USD', 'price')).toEqual({ cents: 1299, currency: 'USD' });
    expect(() => parsePrice(12.99, 'USD', 'price')).toThrow(RowError);
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

  it('defaults availability to in_stock and leaves absent prices null', () => {
    const content = normaliseRecord(base, 'https://s/');
    expect(content.availability).toBe('in_stock');
    expect(content.price).toBeNull();
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
});
