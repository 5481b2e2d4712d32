// @ts-check
/**
 * The beginning of a value's JSON text without the rest of it. A one-line preview shows
 * a hundred characters of a state field that may hold a wide join's result (a record of
 * 100,000 keys): serialising all of it to keep the first line is most of a redraw of the
 * panel that shows it.
 */

/** Why the writer stopped: the text has more characters than were asked for. */
const FULL = Symbol("full");

/** A value's JSON, written already (by `JSON.stringify`). */
class Written {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
  }
}

/**
 * Whether `item` (an object, not an array) is plain data, written here: a record JSON
 * parsing could give, with no `toJSON` of its own.
 * @param {object} item
 */
function plain(item) {
  const proto = Object.getPrototypeOf(item);
  return (proto === Object.prototype || proto === null)
    && typeof (/** @type {any} */ (item)).toJSON !== "function";
}

/**
 * The first `limit` characters of `JSON.stringify(value, null, indent)`, and whether its
 * text is longer (`cut`); `text` is `undefined` when `JSON.stringify` gives `undefined`.
 * Throws what `JSON.stringify` throws (a cycle, a BigInt). Plain data (what JSON parsing
 * gives: null, booleans, numbers, strings, arrays and plain objects) is written here up
 * to the limit; anything else (a `toJSON`, a class instance) by `JSON.stringify` itself.
 * @param {any} value @param {number} limit @param {number} [indent]  spaces a level, as
 *   `JSON.stringify`'s third argument (0: one line)
 * @returns {{text: string | undefined, cut: boolean}}
 */
export function jsonPrefix(value, limit, indent = 0) {
  /** @type {string[]} */
  const parts = [];
  let size = 0;
  /** @type {any[]} containers being written, to refuse a cycle as JSON.stringify does */
  const open = [];
  const step = " ".repeat(Math.max(0, Math.min(10, Math.floor(indent))));
  /** The break before an item at the depth of `open`, and its indentation (none on one line). */
  const newline = () => (step ? `\n${step.repeat(open.length)}` : "");
  const colon = step ? ": " : ":";
  /** What `JSON.stringify` wrote of a value it alone can write, at the depth of `open`
   * (its lines indented from there, as nested in the text around it).
   * @param {any} item */
  const foreign = (item) => {
    const text = JSON.stringify(item, null, step);
    return text === undefined || !step ? text : text.split("\n").join(newline());
  };
  /** @param {string} text */
  const put = (text) => {
    parts.push(text);
    size += text.length;
    if (size > limit) throw FULL;
  };
  /** @param {any} item @returns {boolean} whether it wrote anything (as in an object) */
  const write = (item) => {
    if (item === null) {
      put("null");
      return true;
    }
    switch (typeof item) {
      case "string":
        // Escaping only lengthens and the text opens with a quote: its first `limit`
        // characters come from fewer than `limit` of the string, so a surrogate pair cut
        // at the slice's end is escaped past them.
        put(JSON.stringify(item.length > limit ? item.slice(0, limit) : item));
        return true;
      case "number":
      case "boolean":
        put(JSON.stringify(item));
        return true;
      case "object":
        break;
      default: { // undefined, a function, a symbol: left out (null in an array); a BigInt throws
        const text = foreign(item);
        if (text === undefined) return false;
        put(text);
        return true;
      }
    }
    const plainArray = Array.isArray(item);
    if (!plainArray && !plain(item)) {
      const text = foreign(item);
      if (text === undefined) return false;
      put(text);
      return true;
    }
    if (open.includes(item)) throw new TypeError("Converting circular structure to JSON");
    open.push(item);
    if (plainArray) {
      put("[");
      for (let i = 0; i < item.length; i += 1) {
        put(i ? `,${newline()}` : newline());
        if (!write(item[i])) put("null");
      }
      open.pop();
      put(item.length ? `${newline()}]` : "]");
    } else {
      put("{");
      let first = true;
      for (const key in item) {
        if (!Object.prototype.hasOwnProperty.call(item, key)) continue;
        let field = item[key];
        // A value JSON leaves out takes its key with it: known before the key is written.
        if (field !== null && typeof field === "object" && !Array.isArray(field) && !plain(field)) {
          const text = foreign(field);
          if (text === undefined) continue;
          field = new Written(text);
        } else if (field === undefined || typeof field === "function" || typeof field === "symbol") {
          continue;
        }
        put(`${first ? "" : ","}${newline()}${JSON.stringify(key)}${colon}`);
        first = false;
        if (field instanceof Written) put(field.text);
        else write(field);
      }
      open.pop();
      put(first ? "}" : `${newline()}}`);
    }
    return true;
  };
  try {
    if (!write(value)) return { text: undefined, cut: false };
  } catch (error) {
    if (error !== FULL) throw error;
    return { text: parts.join("").slice(0, limit), cut: true };
  }
  return { text: parts.join(""), cut: false };
}
