package examplegroups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The shop group shows progressive tools across the mesh: a catalog behind three levels
// of plain facades, and a cart that a selectable facade opens. Opening a cart creates
// its tools (cart_add, cart_view, cart_checkout) through the template shop_cart, each
// described for the store it was opened in ("Add a quantity of a product to the cart at
// postgres://shop/main"). The cart lives in the state the orchestrator keeps and sends
// with every call, never in worker memory, so any replica can serve any call and rebuild
// the cart's tools from it. Stock levels and prices are computed from the SKU: the
// same SKU always gives the same answer, and nothing outside the process is contacted.

// Shop group texts.
const (
	ShopRole        = "shop"
	ShopDescription = "Shop tools: browse the catalog, check stock and prices, and fill a cart"
	ShopUsageNotes  = "Use catalog to check stock and prices. Use open_cart with the store's connection string to add products to a cart, view it and check out."

	// CatalogFacade is the outer facade of the catalog: catalog → inventory → stock →
	// stock_level, stock_reserve; catalog → pricing → price_quote.
	CatalogFacade            = "catalog"
	CatalogDescription       = "Shop catalog: browse products, check stock and prices"
	InventoryFacade          = "inventory"
	InventoryDescription     = "Inventory: check and reserve the stock of products"
	StockFacade              = "stock"
	StockDescription         = "Stock: look up and reserve units of a product"
	PricingFacade            = "pricing"
	PricingDescription       = "Pricing: quote the price of products"
	OpenCartFacade           = "open_cart"
	OpenCartDescription      = "Open a shopping cart in a store. Call it with the store's connection string to get the tools that fill the cart and check it out."
	OpenCartStoreDescription = "connection string of the store, such as postgres://shop/main"
	OpenCartUsageNotes       = "Use cart_add to add a product, cart_view to see the cart, cart_checkout to check it out."
	CartTemplate             = "shop_cart"
	CartTemplateDescription  = "The tools of a cart; open_cart creates them for the store it opens the cart in"
	// The descriptions of the cart's tools, each followed by the cart's store.
	CartAddDescription      = "Add a quantity of a product to the cart at "
	CartViewDescription     = "Show the items of the cart at "
	CartCheckoutDescription = "Check out (summarise and empty) the cart at "
)

// ErrNoCart is the error of a cart tool called without an open cart.
var ErrNoCart = errors.New("no cart is open: call open_cart first")

// SKU is the input of the catalog's look-ups.
type SKU struct {
	SKU string `json:"sku" jsonschema:"the product's stock keeping unit, such as A-100"`
}

// Line is a quantity of a product: the input of stock_reserve, price_quote and cart_add,
// and an item of a cart.
type Line struct {
	SKU      string `json:"sku" jsonschema:"the product's stock keeping unit, such as A-100"`
	Quantity int    `json:"quantity" jsonschema:"how many units"`
}

// Cart is the state of an open cart, as it travels between the orchestrator and the
// workers: {"store":"postgres://shop/main","items":[{"sku":"A-100","quantity":2}]}.
type Cart struct {
	Store string `json:"store"`
	Items []Line `json:"items"`
}

// OpenCart is the input of open_cart.
type OpenCart struct {
	Store string `json:"store"`
}

// none is the input of the tools without parameters.
type none struct{}

// Shop returns the shop group: the facades catalog and open_cart.
func Shop() worker.Group { return shopGroup(nil) }

func shopGroup(wrap Wrap) worker.Group {
	stock := wrap.all([]tool.Tool{
		tool.MustFunc("stock_level", "Look up how many units of a product are in stock", stockLevelTool, tool.Idempotent()),
		tool.MustFunc("stock_reserve", "Reserve units of a product for an order", stockReserveTool),
	})
	pricing := wrap.all([]tool.Tool{
		tool.MustFunc("price_quote", "Quote the price of a quantity of a product", priceQuoteTool, tool.Idempotent()),
	})
	cart := tool.NewTemplate(CartTemplate, CartTemplateDescription, func(_ context.Context, state []byte) ([]tool.Tool, error) {
		c, err := readCart(state)
		if err != nil {
			return nil, err
		}
		return wrap.all(CartTools(c.Store)), nil
	})
	catalog := tool.Of(CatalogFacade, CatalogDescription, []tool.Tool{
		tool.Of(InventoryFacade, InventoryDescription, []tool.Tool{
			tool.Of(StockFacade, StockDescription, stock),
		}),
		tool.Of(PricingFacade, PricingDescription, pricing),
	})
	openCart := tool.Selectable(OpenCartFacade, OpenCartDescription,
		schema.Params(schema.String("store", OpenCartStoreDescription)), []tool.Tool{cart},
		tool.SelectorFunc(func(ctx context.Context, input string) ([]tool.Tool, error) {
			state, err := openCartSelect(ctx, input)
			if err != nil {
				return nil, err
			}
			return cart.Create(ctx, state)
		}),
		tool.UsageNotes(OpenCartUsageNotes))
	return worker.Group{
		Role:        ShopRole,
		Description: ShopDescription,
		UsageNotes:  ShopUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Facades:     []tool.Facade{catalog, openCart},
	}
}

// CartTools are the tools of a cart in store, as the template shop_cart creates them.
func CartTools(store string) []tool.Tool {
	return []tool.Tool{
		tool.MustFunc("cart_add", CartAddDescription+store, cartAdd),
		tool.MustFunc("cart_view", CartViewDescription+store, cartView, tool.Idempotent()),
		tool.MustFunc("cart_checkout", CartCheckoutDescription+store, cartCheckout),
	}
}

// maxStoreBytes bounds a store's connection string: it is part of the cart tools'
// descriptions.
const maxStoreBytes = 256

// openCartSelect binds a new, empty cart of the store to the call's state and returns
// that state.
func openCartSelect(ctx context.Context, input string) ([]byte, error) {
	var in OpenCart
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		return nil, fmt.Errorf("the arguments are not a JSON object with a store: %v", err)
	}
	if err := checkStore(in.Store); err != nil {
		return nil, err
	}
	st := tool.StateFrom(ctx)
	if st == nil {
		return nil, errors.New("open_cart has no state to keep the cart in: it must be called through the orchestrator")
	}
	if err := saveCart(st, Cart{Store: in.Store}); err != nil {
		return nil, err
	}
	return st.Bytes(), nil
}

func checkStore(store string) error {
	switch {
	case strings.TrimSpace(store) == "":
		return errors.New("store is empty: give the store's connection string, such as postgres://shop/main")
	case len(store) > maxStoreBytes || strings.ContainsAny(store, "\r\n"):
		return fmt.Errorf("store is not a connection string: one line of at most %d bytes, such as postgres://shop/main", maxStoreBytes)
	}
	return nil
}

// readCart reads a cart from state.
func readCart(state []byte) (Cart, error) {
	if len(state) == 0 {
		return Cart{}, ErrNoCart
	}
	var c Cart
	if err := json.Unmarshal(state, &c); err != nil || checkStore(c.Store) != nil {
		return Cart{}, fmt.Errorf("the cart cannot be read (call open_cart to open a new one): %q", state)
	}
	return c, nil
}

// StockLevel is the number of units of sku in stock, 0 to 99.
func StockLevel(sku string) int { return int(skuHash(sku) % 100) }

// UnitPriceCents is the price of one unit of sku in cents, 100 to 9999.
func UnitPriceCents(sku string) int { return 100 + int(skuHash(sku)/100%9900) }

func skuHash(sku string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sku))
	return h.Sum32()
}

func checkSKU(sku string) error {
	if strings.TrimSpace(sku) == "" {
		return errors.New("sku is empty: give a product's stock keeping unit, such as A-100")
	}
	return nil
}

func checkLine(in Line) error {
	if err := checkSKU(in.SKU); err != nil {
		return err
	}
	if in.Quantity < 1 {
		return fmt.Errorf("quantity must be at least 1, not %d", in.Quantity)
	}
	return nil
}

// stockLevelTool answers "A-100: 42 in stock".
func stockLevelTool(_ context.Context, in SKU) (string, error) {
	if err := checkSKU(in.SKU); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %d in stock", in.SKU, StockLevel(in.SKU)), nil
}

// stockReserveTool answers "reserved 5 of A-100 (42 in stock, 37 left)". Stock levels are
// computed, so a reservation does not lower the next answer.
func stockReserveTool(_ context.Context, in Line) (string, error) {
	if err := checkLine(in); err != nil {
		return "", err
	}
	level := StockLevel(in.SKU)
	if in.Quantity > level {
		return "", fmt.Errorf("cannot reserve %d of %s: only %d in stock", in.Quantity, in.SKU, level)
	}
	return fmt.Sprintf("reserved %d of %s (%d in stock, %d left)", in.Quantity, in.SKU, level, level-in.Quantity), nil
}

// priceQuoteTool answers "5 x A-100 at 12.34 each: 61.70".
func priceQuoteTool(_ context.Context, in Line) (string, error) {
	if err := checkLine(in); err != nil {
		return "", err
	}
	unit := UnitPriceCents(in.SKU)
	return fmt.Sprintf("%d x %s at %s each: %s", in.Quantity, in.SKU, cents(unit), cents(unit*in.Quantity)), nil
}

func cents(c int) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// cartAdd appends a line to the cart: "added 2 x A-100 to the cart at
// postgres://shop/main (1 item in the cart)".
func cartAdd(ctx context.Context, in Line) (string, error) {
	if err := checkLine(in); err != nil {
		return "", err
	}
	st, c, err := loadCart(ctx)
	if err != nil {
		return "", err
	}
	c.Items = append(c.Items, in)
	if err := saveCart(st, c); err != nil {
		return "", err
	}
	return fmt.Sprintf("added %d x %s to the cart at %s (%s in the cart)", in.Quantity, in.SKU, c.Store, plural(len(c.Items), "item")), nil
}

// cartView answers the cart as its JSON state.
func cartView(ctx context.Context, _ none) (string, error) {
	_, c, err := loadCart(ctx)
	if err != nil {
		return "", err
	}
	if c.Items == nil {
		c.Items = []Line{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// cartCheckout summarises the cart and empties it: "checked out the cart at
// postgres://shop/main: 2 items, total quantity 5; the cart is now empty".
func cartCheckout(ctx context.Context, _ none) (string, error) {
	st, c, err := loadCart(ctx)
	if err != nil {
		return "", err
	}
	if len(c.Items) == 0 {
		return "", fmt.Errorf("the cart at %s is empty: add products with cart_add before checking out", c.Store)
	}
	total := 0
	for _, it := range c.Items {
		total += it.Quantity
	}
	n := len(c.Items)
	c.Items = nil
	if err := saveCart(st, c); err != nil {
		return "", err
	}
	return fmt.Sprintf("checked out the cart at %s: %s, total quantity %d; the cart is now empty", c.Store, plural(n, "item"), total), nil
}

// loadCart reads the cart from the call's state.
func loadCart(ctx context.Context) (*tool.State, Cart, error) {
	st := tool.StateFrom(ctx)
	c, err := readCart(st.Bytes())
	if err != nil {
		return nil, Cart{}, err
	}
	return st, c, nil
}

// saveCart replaces the call's state with c.
func saveCart(st *tool.State, c Cart) error {
	if c.Items == nil {
		c.Items = []Line{} // "items":[] rather than null
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	st.Set(b)
	return nil
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
