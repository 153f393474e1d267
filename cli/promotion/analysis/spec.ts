/**
 * An analysis file (`promote --analysis FILE`, `phases/phaseN/analysis.yaml`): the subset of an Argo
 * Rollouts AnalysisTemplate the promotion runs (docs/promotion.md § Analysis). YAML (or JSON, which is
 * YAML), either `{metrics: [...]}` or a whole AnalysisTemplate (`spec.metrics`). Per metric: `name`,
 * `provider.prometheus.query` (and optionally `address`), `interval`, `count`, `initialDelay`,
 * `successCondition`, `failureCondition`, `failureLimit`, `consecutiveErrorLimit`, `inconclusiveLimit`.
 * Any other field is refused by name, so an Argo feature this does not run is never silently ignored.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { type Condition, ConditionError, parseCondition } from './conditions.js';

export interface AnalysisMetric {
  name: string;
  query: string;
  /** The Prometheus to ask instead of the environment's. */
  address?: string;
  intervalMs: number;
  count: number;
  initialDelayMs: number;
  successCondition?: Condition;
  failureCondition?: Condition;
  failureLimit: number;
  consecutiveErrorLimit: number;
  inconclusiveLimit: number;
}

export interface Analysis {
  /** Where it came from (a path), for messages and the audit. */
  source: string;
  metrics: AnalysisMetric[];
}

/** Argo's defaults where a field is left out. */
export const ANALYSIS_DEFAULTS = {
  count: 1,
  failureLimit: 0,
  consecutiveErrorLimit: 4,
  inconclusiveLimit: 0,
};

const DURATION = /^(\d+)(ms|s|m|h)$/;
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** "500ms", "2s", "5m", "1h" (Argo's duration strings, one unit). */
export function parseDuration(text: string): number | undefined {
  const match = DURATION.exec(text);
  return match ? Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS] : undefined;
}

const duration = z.string().refine((text) => parseDuration(text) !== undefined, {
  message: 'must be a duration like 500ms, 2s, 5m or 1h',
});
const limit = z.number().int().min(0);

const MetricSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, 'letters, digits, _ . and -; at most 63'),
  interval: duration.optional(),
  count: z.number().int().min(1).optional(),
  initialDelay: duration.optional(),
  successCondition: z.string().min(1).optional(),
  failureCondition: z.string().min(1).optional(),
  failureLimit: limit.optional(),
  consecutiveErrorLimit: limit.optional(),
  inconclusiveLimit: limit.optional(),
  provider: z.strictObject({
    prometheus: z.strictObject({
      address: z.url({ protocol: /^https?$/ }).optional(),
      query: z.string().min(1),
    }),
  }),
});

const MetricsSchema = z.array(MetricSchema).min(1);

const FileSchema = z.union([
  z.strictObject({ metrics: MetricsSchema }),
  z.strictObject({
    apiVersion: z.string().optional(),
    kind: z.literal('AnalysisTemplate'),
    metadata: z.unknown().optional(),
    spec: z.strictObject({ metrics: MetricsSchema }),
  }),
]);

/** An analysis file's problem, its field named (`metrics.0.successCondition: …`). */
export class AnalysisFileError extends Error {}

function condition(text: string | undefined, field: string): Condition | undefined {
  if (text === undefined) return undefined;
  try {
    return parseCondition(text);
  } catch (error) {
    if (error instanceof ConditionError) throw new AnalysisFileError(`${field}: ${error.message}`);
    throw error;
  }
}

function metricOf(raw: z.infer<typeof MetricSchema>, field: string): AnalysisMetric {
  if (raw.successCondition === undefined && raw.failureCondition === undefined)
    throw new AnalysisFileError(`${field}: give successCondition, failureCondition or both`);
  const count = raw.count ?? ANALYSIS_DEFAULTS.count;
  if (count > 1 && raw.interval === undefined)
    throw new AnalysisFileError(`${field}.interval: needed when count is more than 1`);
  return {
    name: raw.name,
    query: raw.provider.prometheus.query,
    ...(raw.provider.prometheus.address ? { address: raw.provider.prometheus.address } : {}),
    intervalMs: raw.interval ? parseDuration(raw.interval)! : 0,
    count,
    initialDelayMs: raw.initialDelay ? parseDuration(raw.initialDelay)! : 0,
    successCondition: condition(raw.successCondition, `${field}.successCondition`),
    failureCondition: condition(raw.failureCondition, `${field}.failureCondition`),
    failureLimit: raw.failureLimit ?? ANALYSIS_DEFAULTS.failureLimit,
    consecutiveErrorLimit: raw.consecutiveErrorLimit ?? ANALYSIS_DEFAULTS.consecutiveErrorLimit,
    inconclusiveLimit: raw.inconclusiveLimit ?? ANALYSIS_DEFAULTS.inconclusiveLimit,
  };
}

/** Checks an analysis document (already parsed from YAML); AnalysisFileError names the field. */
export function analysisOf(raw: unknown, source: string): Analysis {
  const parsed = FileSchema.safeParse(raw);
  if (!parsed.success) {
    // The union's own message says little: name the problems of the form the file looks like.
    const looksLikeTemplate = typeof raw === 'object' && raw !== null && 'spec' in raw;
    const again = (looksLikeTemplate ? FileSchema.options[1] : FileSchema.options[0]).safeParse(raw);
    const issues = again.success ? parsed.error.issues : again.error.issues;
    throw new AnalysisFileError(
      issues.map((issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`).join('; '),
    );
  }
  const { metrics, prefix } =
    'spec' in parsed.data
      ? { metrics: parsed.data.spec.metrics, prefix: 'spec.metrics' }
      : { metrics: parsed.data.metrics, prefix: 'metrics' };
  const seen = new Set<string>();
  return {
    source,
    metrics: metrics.map((metric, i) => {
      if (seen.has(metric.name))
        throw new AnalysisFileError(`${prefix}.${i}.name: "${metric.name}" is there twice`);
      seen.add(metric.name);
      return metricOf(metric, `${prefix}.${i}`);
    }),
  };
}

/** Reads and checks an analysis file; AnalysisFileError says what is wrong (unreadable, not YAML, a field). */
export function readAnalysisFile(path: string): Analysis {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new AnalysisFileError(`cannot read ${path} (${code === 'ENOENT' ? 'no such file' : code})`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new AnalysisFileError(`${path} is not valid YAML (${(error as Error).message.split('\n')[0]})`);
  }
  try {
    return analysisOf(raw, path);
  } catch (error) {
    if (error instanceof AnalysisFileError) throw new AnalysisFileError(`${path}: ${error.message}`);
    throw error;
  }
}

/** How long a metric's measurements take (the initial delay, then count - 1 intervals). */
export function metricSpanMs(metric: AnalysisMetric): number {
  return metric.initialDelayMs + (metric.count - 1) * metric.intervalMs;
}
