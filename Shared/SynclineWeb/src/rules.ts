// The app's rules as the server gives them (`GET /v1/rules`), compiled once per version so
// that a write the server would refuse for this device's role is refused at the call: the
// same checks as the gateway's intake (the collection's default, the op type's right, the
// data's schema). What needs the stored record (the author, immutable fields, rights on
// fields) is the server's to judge when the job is applied.
import { blobRefOf } from "./blobs.js";
import { isPlainObject } from "./json.js";
import type { Op } from "./op.js";
import type { Role } from "./spaces.js";

/** Why the rules refuse an op: the rule's name, where in the op, and what is wrong (for people). */
export interface RuleRefusal {
  rule: string;
  pointer: string;
  detail: string;
}

type JSONType = "object" | "array" | "string" | "number" | "integer" | "boolean" | "null" | "file";

/** A schema node of the rules' JSON Schema subset, its pattern compiled. */
interface Schema {
  types: Set<JSONType> | null;
  properties: Map<string, Schema>;
  required: string[];
  /** `additionalProperties`: true (any), false (none), or a schema. */
  additional: boolean | Schema;
  allowed: unknown[] | null;
  minimum: number | null;
  maximum: number | null;
  minLength: number | null;
  maxLength: number | null;
  pattern: RegExp | null;
  patternSource: string | null;
  items: Schema | null;
  maxItems: number | null;
  maxSize: number | null;
  contentTypes: string[] | null;
}

interface CollectionRules {
  name: string;
  schema: Schema | null;
  /** Roles per op type; a type not named keeps owners and editors. */
  write: Map<string, Set<string>>;
}

const writers = new Set(["owner", "editor"]);

export class ClientRules {
  private constructor(
    readonly version: number,
    readonly allowsUnnamed: boolean,
    private readonly collections: Map<string, CollectionRules>,
  ) {}

  /** Compiles a document as the server answers it; null when it is not one (nothing is refused then). */
  static compile(document: unknown): ClientRules | null {
    if (!isPlainObject(document)) return null;
    const version = typeof document.version === "number" ? document.version : 0;
    const collections = new Map<string, CollectionRules>();
    const named = isPlainObject(document.collections) ? document.collections : {};
    for (const [name, raw] of Object.entries(named)) {
      if (!isPlainObject(raw)) continue;
      const write = new Map<string, Set<string>>();
      if (isPlainObject(raw.write)) {
        for (const [type, roles] of Object.entries(raw.write)) {
          if (type !== "fields" && Array.isArray(roles)) write.set(type, new Set(roles.filter((role): role is string => typeof role === "string")));
        }
      }
      collections.set(name, { name, schema: isPlainObject(raw.schema) ? compileSchema(raw.schema) : null, write });
    }
    return new ClientRules(version, document.default !== "deny", collections);
  }

  /**
   * What the rules say about `op` for a writer with `role` (null: not known yet, so only
   * what no role decides is checked), before any record is read.
   */
  screen(op: Op, role: Role | null): RuleRefusal | null {
    const collection = this.collections.get(op.collection);
    if (!collection) {
      return this.allowsUnnamed ? null : {
        rule: "default", pointer: "/collection", detail: `the rules name no collection '${op.collection}' and refuse the others`,
      };
    }
    const roles = collection.write.get(op.type) ?? writers;
    if (role !== null && (role === "viewer" || (!roles.has(role) && !roles.has("author")))) {
      const names = [...roles].map((name) => (name === "author" ? "the record's author" : name));
      return {
        rule: `${collection.name}.write.${op.type}`, pointer: "/type",
        detail: names.length === 0 ? `no one may ${op.type} in ${collection.name}` : `in ${collection.name}, only ${names.join(" or ")} may ${op.type}`,
      };
    }
    const schema = collection.schema;
    if (schema && op.field !== undefined && (op.type === "increment" || op.type === "add" || op.type === "remove")) {
      return mergedFieldRefusal(collection.name, schema, op, op.field);
    }
    if (!schema || !isPlainObject(op.data)) return null;
    if (op.type === "upsert") {
      const violation = violationOf(schema, op.data, "");
      return violation ? schemaRefusal(collection.name, violation) : null;
    }
    if (op.type !== "patch") return null;
    for (const [name, value] of Object.entries(op.data)) {
      const pointer = `/${escaped(name)}`;
      if (value === null) {
        if (schema.required.includes(name)) return schemaRefusal(collection.name, { pointer, message: "is required and cannot be removed" });
        continue;
      }
      const property = propertySchema(schema, name);
      if (property === undefined) return schemaRefusal(collection.name, { pointer, message: "is not a field of this schema" });
      const violation = property && violationOf(property, value, pointer);
      if (violation) return schemaRefusal(collection.name, violation);
    }
    return null;
  }
}

interface Violation {
  pointer: string;
  message: string;
}

function schemaRefusal(collection: string, violation: Violation, pointer = `/data${violation.pointer}`): RuleRefusal {
  const field = violation.pointer === "" ? "data" : violation.pointer.slice(1);
  return { rule: `${collection}.schema`, pointer, detail: `${field} ${violation.message}` };
}

/** The server's intake check of an increment, add or remove: the field is the schema's, a number for a counter (an integer step for an integer), an array for a set whose items admit each value added. */
function mergedFieldRefusal(collection: string, schema: Schema, op: Op, field: string): RuleRefusal | null {
  const pointer = `/${escaped(field)}`;
  const property = propertySchema(schema, field);
  if (property === undefined) return schemaRefusal(collection, { pointer, message: "is not a field of this schema" }, "/field");
  if (property === null) return null;
  const admits = (type: JSONType) => property.types === null || property.types.has(type);
  if (op.type === "increment") {
    if (!admits("number") && !admits("integer")) {
      return schemaRefusal(collection, { pointer, message: "is not a number: it cannot be incremented" }, "/field");
    }
    return !admits("number") && !Number.isInteger(op.by) ? schemaRefusal(collection, { pointer, message: "must be an integer: by must be one" }, "/by") : null;
  }
  if (!admits("array")) return schemaRefusal(collection, { pointer, message: "is not an array: it cannot hold a set" }, "/field");
  if (op.type !== "add" || !property.items) return null;
  for (const [index, value] of (op.values ?? []).entries()) {
    const violation = violationOf(property.items, value, `${pointer}/${index}`);
    if (violation) return schemaRefusal(collection, violation, `/values/${index}`);
  }
  return null;
}

function escaped(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

function count(value: unknown): number | null {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null;
}

function compileSchema(raw: Record<string, unknown>): Schema {
  const types = typeof raw.type === "string" ? [raw.type] : Array.isArray(raw.type) ? raw.type : null;
  const properties = new Map<string, Schema>();
  if (isPlainObject(raw.properties)) {
    for (const [name, schema] of Object.entries(raw.properties)) if (isPlainObject(schema)) properties.set(name, compileSchema(schema));
  }
  let pattern: RegExp | null = null;
  if (typeof raw.pattern === "string") {
    try {
      pattern = new RegExp(raw.pattern, "u");
    } catch {
      pattern = null;  // a pattern JavaScript reads otherwise is the server's to judge
    }
  }
  const allowed = "const" in raw ? [raw.const] : Array.isArray(raw.enum) ? raw.enum : null;
  return {
    types: types ? new Set(types.filter((type): type is JSONType => typeof type === "string") as JSONType[]) : null,
    properties,
    required: Array.isArray(raw.required) ? raw.required.filter((name): name is string => typeof name === "string") : [],
    additional: raw.additionalProperties === false ? false : isPlainObject(raw.additionalProperties) ? compileSchema(raw.additionalProperties) : true,
    allowed,
    minimum: typeof raw.minimum === "number" ? raw.minimum : null,
    maximum: typeof raw.maximum === "number" ? raw.maximum : null,
    minLength: count(raw.minLength),
    maxLength: count(raw.maxLength),
    pattern,
    patternSource: typeof raw.pattern === "string" ? raw.pattern : null,
    items: isPlainObject(raw.items) ? compileSchema(raw.items) : null,
    maxItems: count(raw.maxItems),
    maxSize: count(raw.maxSize),
    contentTypes: Array.isArray(raw.contentTypes) ? raw.contentTypes.filter((type): type is string => typeof type === "string") : null,
  };
}

/** A property's schema: its own, `additionalProperties`' (null: any value), or undefined when it may not be there. */
function propertySchema(schema: Schema, name: string): Schema | null | undefined {
  const own = schema.properties.get(name);
  if (own) return own;
  if (schema.additional === true) return null;
  if (schema.additional === false) return undefined;
  return schema.additional;
}

function typeMatches(value: unknown, types: Set<JSONType>): boolean {
  if (value === null) return types.has("null");
  switch (typeof value) {
    case "boolean": return types.has("boolean");
    case "number": return types.has("number") || (types.has("integer") && Number.isInteger(value));
    case "string": return types.has("string");
    default: break;
  }
  if (Array.isArray(value)) return types.has("array");
  return types.has("object") || (types.has("file") && blobRefOf(value as never) !== null);
}

function equal(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keysA = Object.keys(a), keysB = Object.keys(b);
  if (keysA.length !== keysB.length) return false;
  return keysA.every((key) => equal((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]));
}

function violationOf(schema: Schema, value: unknown, pointer: string): Violation | null {
  if (schema.types && !typeMatches(value, schema.types)) return { pointer, message: `must be of type ${[...schema.types].join(" or ")}` };
  if (schema.allowed && !schema.allowed.some((allowed) => equal(allowed, value))) {
    return { pointer, message: `must be one of ${schema.allowed.map((allowed) => JSON.stringify(allowed)).join(", ")}` };
  }
  if (typeof value === "number") {
    if (schema.minimum !== null && value < schema.minimum) return { pointer, message: `must be at least ${schema.minimum}` };
    if (schema.maximum !== null && value > schema.maximum) return { pointer, message: `must be at most ${schema.maximum}` };
  } else if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== null && length < schema.minLength) return { pointer, message: `must be at least ${schema.minLength} characters long` };
    if (schema.maxLength !== null && length > schema.maxLength) return { pointer, message: `must be at most ${schema.maxLength} characters long` };
    if (schema.pattern && !schema.pattern.test(value)) return { pointer, message: `must match the pattern ${schema.patternSource}` };
  } else if (Array.isArray(value)) {
    if (schema.maxItems !== null && value.length > schema.maxItems) return { pointer, message: `must hold at most ${schema.maxItems} items` };
    if (schema.items) {
      for (let index = 0; index < value.length; index++) {
        const violation = violationOf(schema.items, value[index], `${pointer}/${index}`);
        if (violation) return violation;
      }
    }
  } else if (isPlainObject(value)) {
    const file = schema.types?.has("file") ? blobRefOf(value as never) : null;
    if (file) {
      if (schema.maxSize !== null && file.size > schema.maxSize) return { pointer, message: `must be a file of at most ${schema.maxSize} bytes` };
      if (schema.contentTypes) {
        const type = file.content_type.split(";")[0].trim().toLowerCase();
        if (!schema.contentTypes.some((allowed) => allowed === type || allowed === `${type.split("/")[0]}/*`)) {
          return { pointer, message: `must be a file of type ${schema.contentTypes.join(" or ")}` };
        }
      }
      return null;
    }
    for (const name of schema.required) if (!(name in value)) return { pointer: `${pointer}/${escaped(name)}`, message: "is required" };
    for (const [name, field] of Object.entries(value)) {
      const property = propertySchema(schema, name);
      const fieldPointer = `${pointer}/${escaped(name)}`;
      if (property === undefined) return { pointer: fieldPointer, message: "is not a field of this schema" };
      const violation = property && violationOf(property, field, fieldPointer);
      if (violation) return violation;
    }
  }
  return null;
}
