Bout0J`ÎtBRuB
ütBuB’ÍtB•uBèuBwätBˆçvBUwBßwBÐwB²çvBz-wBBwB¯þvB>yBtUyBSMyBžUyB²yBÇeyB…UyB5yB