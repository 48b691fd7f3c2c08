import type { UsageReport } from './api.ts';

/** Requests per day as stacked bars per endpoint, with 429s as a line: an inline SVG, no library. */
const SVG = 'http://www.w3.org/2000/svg';
export const ENDPOINT_COLOURS: Record<string, string> = {
  search_image: '#0b57d0',
  detect: '#0a7d6b',
  related: '#8a4fd0',
  root_search: '#b06000',
};
export const RATE_LIMITED_COLOUR = '#c5221f';

function el<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
  text?: string,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function daysBetween(from: string, to: string): string[] {
  const days: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86_400_000)
    days.push(new Date(t).toISOString().slice(0, 10));
  return days;
}

/** Top of the y axis: four grid steps of 1, 2 or 5 × 10^n, so every tick label is a whole number. */
function niceMax(value: number): number {
  const raw = Math.max(1, value / 4);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? 10 * magnitude;
  return step * 4;
}

export function usageChart(report: UsageReport): SVGSVGElement {
  const days = daysBetween(report.from, report.to);
  const endpoints = [...new Set(report.days.map((row) => row.endpoint))].sort();
  const perDay = new Map<string, Record<string, number>>();
  const limited = new Map<string, number>();
  for (const row of report.days) {
    const entry = perDay.get(row.day) ?? {};
    entry[row.endpoint] = (entry[row.endpoint] ?? 0) + row.requests;
    perDay.set(row.day, entry);
    limited.set(row.day, (limited.get(row.day) ?? 0) + row.rateLimited);
  }
  const totals = days.map((day) => Object.values(perDay.get(day) ?? {}).reduce((a, b) => a + b, 0));
  const max = niceMax(Math.max(0, ...totals));
  const width = 760;
  const height = 260;
  const left = 48;
  const bottom = 28;
  const top = 12;
  const plotW = width - left - 12;
  const plotH = height - top - bottom;
  const slot = plotW / Math.max(1, days.length);
  const barW = Math.max(2, Math.min(28, slot * 0.7));
  const y = (v: number) => top + plotH - (v / max) * plotH;

  const total = report.totals.requests;
  const svg = el('svg', {
    viewBox: `0 0 ${width} ${height}`,
    class: 'chart',
    role: 'img',
    'aria-labelledby': 'usage-chart-title',
  });
  svg.append(
    el(
      'title',
      { id: 'usage-chart-title' },
      `Requests per day from ${report.from} to ${report.to}: ${total} requests, ${report.totals.rateLimited} answered 429.`,
    ),
  );
  for (let i = 0; i <= 4; i++) {
    const value = (max / 4) * i;
    svg.append(el('line', { x1: left, x2: width - 12, y1: y(value), y2: y(value), class: 'grid' }));
    svg.append(
      el(
        'text',
        { x: left - 6, y: y(value) + 4, 'text-anchor': 'end', class: 'axis' },
        String(Math.round(value)),
      ),
    );
  }
  const labelEvery = Math.ceil(days.length / 10);
  days.forEach((day, i) => {
    const x = left + i * slot + (slot - barW) / 2;
    let base = 0;
    for (const endpoint of endpoints) {
      const value = perDay.get(day)?.[endpoint] ?? 0;
      if (value === 0) continue;
      const rect = el('rect', {
        x,
        y: y(base + value),
        width: barW,
        height: Math.max(1, y(base) - y(base + value)),
        fill: ENDPOINT_COLOURS[endpoint] ?? '#555',
        'data-day': day,
        'data-endpoint': endpoint,
      });
      rect.append(el('title', {}, `${day} ${endpoint}: ${value}`));
      svg.append(rect);
      base += value;
    }
    if (i % labelEvery === 0)
      svg.append(
        el('text', { x: x + barW / 2, y: height - 8, 'text-anchor': 'middle', class: 'axis' }, day.slice(5)),
      );
  });
  const points = days.map((day, i) => `${left + i * slot + slot / 2},${y(limited.get(day) ?? 0)}`).join(' ');
  svg.append(
    el('polyline', {
      points,
      fill: 'none',
      stroke: RATE_LIMITED_COLOUR,
      'stroke-width': 2,
      'stroke-dasharray': '5 3',
      class: 'limited',
    }),
  );
  days.forEach((day, i) => {
    const count = limited.get(day) ?? 0;
    if (count === 0) return;
    const dot = el('circle', {
      cx: left + i * slot + slot / 2,
      cy: y(count),
      r: 4,
      fill: RATE_LIMITED_COLOUR,
    });
    dot.append(el('title', {}, `${day}: ${count} answered 429`));
    svg.append(dot);
  });
  return svg;
}
