/**
 * PNG plots of latency distributions without a browser or native code: a cumulative distribution per
 * series drawn into an RGB raster, encoded by a tiny PNG writer on node:zlib. The x axis runs from 0 to
 * the largest series' p99.5 (labelled with digits from a 3×5 font); the y axis from 0 to 100 % with a
 * grid line every 10 %. Colours are listed in RESULTS.md beside each plot.
 */
import { writeFileSync } from 'node:fs';
import { deflateSync } from 'node:zlib';

export const COLOURS: Record<string, [number, number, number]> = {
  blue: [31, 119, 180],
  orange: [255, 127, 14],
  green: [44, 160, 44],
  red: [214, 39, 40],
};

const W = 640;
const H = 400;
const LEFT = 40;
const BOTTOM = 30;
const TOP = 10;
const RIGHT = 20;

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buffer: Buffer): number {
  let c = 0xffffffff;
  for (const byte of buffer) c = CRC_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

/** An 8-bit RGB PNG of `pixels` (width × height × 3 bytes, row by row). */
export function encodePng(pixels: Buffer, width: number, height: number): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++)
    pixels.copy(raw, y * (width * 3 + 1) + 1, y * width * 3, (y + 1) * width * 3);
  return Buffer.concat([
    Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

// 3×5 digits, each row 3 bits.
const DIGITS: Record<string, number[]> = {
  '0': [7, 5, 5, 5, 7],
  '1': [2, 6, 2, 2, 7],
  '2': [7, 1, 7, 4, 7],
  '3': [7, 1, 7, 1, 7],
  '4': [5, 5, 7, 1, 1],
  '5': [7, 4, 7, 1, 7],
  '6': [7, 4, 7, 5, 7],
  '7': [7, 1, 1, 1, 1],
  '8': [7, 5, 7, 5, 7],
  '9': [7, 5, 7, 1, 7],
  '.': [0, 0, 0, 0, 2],
};

class Canvas {
  readonly pixels = Buffer.alloc(W * H * 3, 255);
  set(x: number, y: number, [r, g, b]: [number, number, number]) {
    if (x < 0 || y < 0 || x >= W || y >= H) return;
    this.pixels.set([r, g, b], (Math.round(y) * W + Math.round(x)) * 3);
  }
  line(x0: number, y0: number, x1: number, y1: number, colour: [number, number, number], thick = 1) {
    const steps = Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0), 1);
    for (let i = 0; i <= steps; i++) {
      const x = x0 + ((x1 - x0) * i) / steps;
      const y = y0 + ((y1 - y0) * i) / steps;
      for (let d = 0; d < thick; d++) {
        this.set(x, y + d, colour);
        this.set(x + d, y, colour);
      }
    }
  }
  text(x: number, y: number, text: string, scale = 2) {
    let cx = x;
    for (const ch of text) {
      const rows = DIGITS[ch];
      if (rows)
        rows.forEach((bits, row) => {
          for (let col = 0; col < 3; col++)
            if (bits & (4 >> col))
              for (let dx = 0; dx < scale; dx++)
                for (let dy = 0; dy < scale; dy++)
                  this.set(cx + col * scale + dx, y + row * scale + dy, [0, 0, 0]);
        });
      cx += 4 * scale;
    }
  }
}

/** Writes a CDF plot of each series (latencies in ms) to `file`. Returns the x-axis maximum (ms). */
export function plotCdf(
  file: string,
  series: Array<{ colour: keyof typeof COLOURS; values: number[] }>,
): number {
  const canvas = new Canvas();
  const sorted = series.map((s) => ({
    colour: COLOURS[s.colour]!,
    values: Float64Array.from(s.values).sort(),
  }));
  const xMax = Math.max(
    1,
    ...sorted.map((s) =>
      s.values.length ? s.values[Math.min(s.values.length - 1, Math.floor(s.values.length * 0.995))]! : 0,
    ),
  );
  const plotW = W - LEFT - RIGHT;
  const plotH = H - TOP - BOTTOM;
  const grey: [number, number, number] = [220, 220, 220];
  for (let i = 0; i <= 10; i++) {
    const y = TOP + plotH - (plotH * i) / 10;
    canvas.line(LEFT, y, LEFT + plotW, y, grey);
    const x = LEFT + (plotW * i) / 10;
    canvas.line(x, TOP, x, TOP + plotH, grey);
  }
  canvas.line(LEFT, TOP + plotH, LEFT + plotW, TOP + plotH, [0, 0, 0]);
  canvas.line(LEFT, TOP, LEFT, TOP + plotH, [0, 0, 0]);
  canvas.text(LEFT - 4, TOP + plotH + 8, '0');
  const label = xMax >= 100 ? String(Math.round(xMax)) : xMax.toFixed(1);
  canvas.text(LEFT + plotW - label.length * 8, TOP + plotH + 8, label);
  canvas.text(4, TOP, '100');
  canvas.text(4, TOP + plotH / 2 - 5, '50');
  for (const { colour, values } of sorted) {
    if (values.length === 0) continue;
    let px = LEFT;
    let py = TOP + plotH;
    for (let col = 0; col <= plotW; col++) {
      const limit = (xMax * col) / plotW;
      // fraction of values ≤ limit (binary search)
      let lo = 0;
      let hi = values.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (values[mid]! <= limit) lo = mid + 1;
        else hi = mid;
      }
      const x = LEFT + col;
      const y = TOP + plotH - (plotH * lo) / values.length;
      canvas.line(px, py, x, y, colour, 2);
      px = x;
      py = y;
    }
  }
  writeFileSync(file, encodePng(canvas.pixels, W, H));
  return xMax;
}
